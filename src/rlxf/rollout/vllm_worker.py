"""The rlxf side of vLLM's workers: in-place weight loading and read-back (``rollout/vllm_engine.py``).

vLLM mixes :class:`RlxfWorkerExtension` into its worker class (``worker_extension_cls``); the engine calls
its methods through ``LLM.collective_rpc``. ``self`` is the vLLM worker (``self.model_runner.model`` is the
vLLM model). Importable without vLLM: the workers import it by its qualified name.

Why loading goes through vLLM's layer-wise reload (``vllm.model_executor.model_loader.reload``, vLLM >=
0.11) and not a bare ``model.load_weights``: after the first load, ``process_weights_after_loading`` turns
some parameters into a kernel format. On CPU every linear layer's weight is packed into a oneDNN (or SGL)
handle and ``layer.weight`` is replaced by an empty placeholder ``Parameter`` that has no ``weight_loader``,
so a second ``load_weights`` fails with ``'Parameter' object has no attribute 'weight_loader'`` (and the
packed copy would not change anyway). The reload machinery puts each layer back in its checkpoint format
(shapes and loaders recorded when the model was built, on the meta device), buffers the incoming tensors
until a layer has all of its weights, then materialises it, loads, and runs the layer's own
``process_weights_after_loading`` again (a fresh pack on CPU). A layer that gets no weights keeps its
kernel tensors. Chunks may split a layer: its tensors wait in the buffer until the last one arrives.

Two things the reload does not cover, done here:

* a tied ``lm_head`` shares ``embed_tokens``' weight, and the reload runs the post-processing of the
  embedding's layer only (vLLM's own list of limitations, number 2): where the head's kernel works on a
  copy of the weight, that copy would keep the old values, so the head's post-processing is run again
  after every load. (On the fp32 and bf16 tiny models tested here the head's kernel read the shared weight
  itself, and the logits followed the new embedding with or without this step.);
* on CPU the linear weights are gone after packing, so ``rlxf_named_weights`` (the checksum's read-back)
  could not see them: while loading, the weight each layer packs is kept beside the pack
  (``_rlxf_loaded_weight``, one extra copy of the linear weights) and read back in its place.
"""

from __future__ import annotations

import contextlib
import functools

import torch

_KEPT = "_rlxf_loaded_weight"  # the checkpoint-format weight a CPU linear layer packed (for read-back)


class RlxfWorkerExtension:
    """Methods vLLM mixes into each worker; the engine calls begin, load (once per chunk), finish."""

    def rlxf_begin_weights(self) -> str:
        """Put the model in layer-wise reload mode; returns the path taken (``reload`` or ``direct``)."""
        self._rlxf_reload = _reload_module() is not None
        if self._rlxf_reload:
            with _vllm_config(self):
                _reload_module().initialize_layerwise_reload(self.model_runner.model)
        return "reload" if self._rlxf_reload else "direct"

    def rlxf_load_weights(self, weights: list[tuple[str, torch.Tensor]]) -> int:
        # The model's load_weights maps HF names onto vLLM's (fused) parameters.
        with _vllm_config(self), _keep_cpu_linear_weights():
            self.model_runner.model.load_weights(weights=weights)
        return len(weights)

    def rlxf_finish_weights(self) -> None:
        model = self.model_runner.model
        with _vllm_config(self), _keep_cpu_linear_weights():
            if getattr(self, "_rlxf_reload", False):
                _reload_module().finalize_layerwise_reload(model, self.model_config)
            else:  # a vLLM before layer-wise reload: the direct load's post-processing
                try:
                    from vllm.model_executor.model_loader.utils import process_weights_after_loading
                except ImportError:
                    return
                device = getattr(self, "device", None) or next(model.parameters()).device
                process_weights_after_loading(model, self.model_config, device)
                return
            _repack_tied_head(model)

    def rlxf_named_weights(self) -> dict[str, torch.Tensor]:
        """vLLM's parameters by vLLM name, with a CPU-packed linear weight read from its kept copy."""
        modules = dict(self.model_runner.model.named_modules())
        out = {}
        for name, param in self.model_runner.model.named_parameters():
            owner, _, leaf = name.rpartition(".")
            kept = getattr(modules.get(owner), _KEPT, None) if leaf == "weight" else None
            tensor = kept if param.numel() == 0 and kept is not None else param
            out[name] = tensor.detach().cpu()
        return out


def _reload_module():
    try:
        from vllm.model_executor.model_loader import reload
    except ImportError:
        return None
    return reload if hasattr(reload, "initialize_layerwise_reload") else None


def _vllm_config(worker):
    """vLLM's config context (layer processing reads it), where this vLLM has one."""
    config = getattr(worker, "vllm_config", None)
    try:
        from vllm.config import set_current_vllm_config
    except ImportError:
        return contextlib.nullcontext()
    return set_current_vllm_config(config) if config is not None else contextlib.nullcontext()


@contextlib.contextmanager
def _keep_cpu_linear_weights():
    """While loading, a CPU linear layer that packs its weight and drops it keeps it in ``_rlxf_loaded_weight``."""
    try:
        from vllm.model_executor.layers import utils
    except ImportError:
        yield
        return
    original = getattr(utils, "dispatch_cpu_unquantized_gemm", None)
    if original is None:
        yield
        return

    @functools.wraps(original)
    def keeping(layer: torch.nn.Module, remove_weight: bool) -> None:
        if remove_weight and not layer.weight.is_meta:
            setattr(layer, _KEPT, layer.weight.detach())
        original(layer, remove_weight)

    utils.dispatch_cpu_unquantized_gemm = keeping
    try:
        yield
    finally:
        utils.dispatch_cpu_unquantized_gemm = original


def _repack_tied_head(model: torch.nn.Module) -> None:
    """Re-run a tied ``lm_head``'s post-processing: its kernel copy (CPU) was made from the old weight."""
    head, embed = getattr(model, "lm_head", None), None
    inner = getattr(model, "model", None)
    if inner is not None:
        embed = getattr(inner, "embed_tokens", None)
    if head is None or embed is None or getattr(head, "weight", None) is not getattr(embed, "weight", None):
        return
    method = getattr(head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)
