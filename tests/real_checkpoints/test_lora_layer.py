"""models/lora_layer.py: the adapted linear adds its update into the base output in place, with peft's
values and gradients, and no output-sized temporary (peft's own forward makes three)."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from rlxf.config import LoraConfig
from rlxf.models.loading import load_causal_lm
from rlxf.models.lora import apply_lora, load_lora, save_lora_checkpoint

peft = pytest.importorskip("peft")
from rlxf.models.lora_layer import InPlaceLoraLinear  # noqa: E402  (needs peft)

TOKENS, IN, OUT, RANK = 12, 16, 40, 2


class NewTensorBytes(TorchDispatchMode):
    """The size of every tensor an op creates (outputs whose storage is none of its inputs': no views)."""

    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        out = func(*args, **kwargs)
        self.sizes += [t.untyped_storage().nbytes() for t in tree_flatten(out)[0]
                       if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs]
        return out


def _adapted_linear(in_place: bool, bias: bool = True, **options) -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential()
    net.add_module("proj", torch.nn.Linear(IN, OUT, bias=bias))
    settings = peft.LoraConfig(r=RANK, lora_alpha=6, target_modules=["proj"], **options)
    if in_place:
        settings._register_custom_module({torch.nn.Linear: InPlaceLoraLinear})
    model = peft.get_peft_model(net, settings)
    with torch.no_grad():  # B starts at 0: give the update a value to compare
        model.base_model.model.proj.lora_B["default"].weight.copy_(torch.randn(OUT, RANK))
    return model


def _forward_backward(model: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    x = x.clone().requires_grad_(True)
    out = model(x)
    (out * torch.linspace(-1, 1, OUT)).sum().backward()
    grads = {name: p.grad for name, p in model.named_parameters() if p.requires_grad}
    return out.detach(), {"x": x.grad, **grads}


@pytest.mark.parametrize("bias", [True, False])
def test_in_place_forward_matches_peft_in_values_and_gradients(bias):
    x = torch.randn(3, TOKENS // 3, IN, generator=torch.Generator().manual_seed(1))
    stock_out, stock_grads = _forward_backward(_adapted_linear(False, bias), x)
    out, grads = _forward_backward(_adapted_linear(True, bias), x)
    assert isinstance(_adapted_linear(True, bias).base_model.model.proj, InPlaceLoraLinear)
    assert (out - stock_out).abs().max() <= 1e-6
    assert set(grads) == set(stock_grads) == {"x", "base_model.model.proj.lora_A.default.weight",
                                              "base_model.model.proj.lora_B.default.weight"}
    for name, grad in grads.items():  # float rounding only (the sum is taken in another order)
        assert (grad - stock_grads[name]).abs().max() <= 1e-6 * stock_grads[name].abs().max(), name


def test_in_place_layer_allocates_no_output_sized_temporary():
    """Per adapted linear, forward: the base output and the rank-r down-projection, where peft adds B's
    output, its scaled copy and the sum (each TOKENS x OUT floats); backward: no output-sized tensor
    (peft scales the output's gradient into a new one; an in-place add on a view of the output would
    make autograd copy it twice)."""
    x = torch.randn(3, TOKENS // 3, IN, requires_grad=True)
    output_bytes, down_bytes = TOKENS * OUT * 4, TOKENS * RANK * 4
    for in_place, forward_outputs, backward_outputs in ((False, 4, 1), (True, 1, 0)):
        model = _adapted_linear(in_place)
        with NewTensorBytes() as forward:
            out = model(x)
        gradient = torch.linspace(-1, 1, out.numel()).view_as(out)
        with NewTensorBytes() as backward:
            out.backward(gradient)
        assert forward.sizes.count(output_bytes) == forward_outputs, (in_place, forward.sizes)
        assert forward.sizes.count(down_bytes) == 1 and len(forward.sizes) == forward_outputs + 1, forward.sizes
        assert backward.sizes.count(output_bytes) == backward_outputs, (in_place, backward.sizes)


def test_disabled_adapter_autocast_and_dora_take_peft_forward():
    x = torch.randn(TOKENS, IN)
    model, stock = _adapted_linear(True), _adapted_linear(False)
    with torch.no_grad(), model.disable_adapter():
        assert torch.equal(model(x), model.base_model.model.proj.base_layer(x))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(model(x), stock(x))
    dora, stock_dora = _adapted_linear(True, use_dora=True), _adapted_linear(False, use_dora=True)
    assert isinstance(dora.base_model.model.proj, InPlaceLoraLinear)
    with torch.no_grad():
        assert torch.equal(dora(x), stock_dora(x)) and not torch.equal(dora(x), model(x))


def test_rlxf_lora_builds_and_resumes_with_the_in_place_layer(checkpoints, tmp_path):
    model = apply_lora(load_causal_lm(checkpoints["qwen2"]), LoraConfig(r=4))
    adapted = [m for m in model.modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
    assert adapted and all(isinstance(m, InPlaceLoraLinear) for m in adapted)
    save_lora_checkpoint(model, tmp_path)
    config = (tmp_path / "policy_adapter" / "adapter_config.json").read_text()
    assert "InPlaceLoraLinear" not in config  # the checkpoint stays peft's plain format
    resumed = load_lora(load_causal_lm(checkpoints["qwen2"]), tmp_path / "policy_adapter")
    layers = [m for m in resumed.modules() if isinstance(m, peft.tuners.lora.LoraLayer)]
    assert len(layers) == len(adapted) and all(isinstance(m, InPlaceLoraLinear) for m in layers)
    assert any(p.requires_grad for p in resumed.parameters())


def test_in_place_layer_under_activation_checkpointing_gives_the_same_gradients(checkpoints):
    """Recomputed in backward, the in-place add sees a fresh base output: the adapters' gradients match."""
    from rlxf.models.training_switches import enable_activation_checkpointing

    ids = torch.tensor([[4, 9, 30, 17, 5, 60, 7, 3]])
    grads, calls = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)  # the same A (peft draws it at random)
        model = apply_lora(load_causal_lm(checkpoints["qwen2"]), LoraConfig(r=4))
        with torch.no_grad():
            for name, p in model.named_parameters():
                if "lora_B" in name:
                    p.fill_(0.01)
        if checkpointing:
            enable_activation_checkpointing(model)
        layer = model.get_base_model().model.layers[0].self_attn.q_proj
        calls.append(0)
        layer.register_forward_hook(lambda *_: calls.__setitem__(-1, calls[-1] + 1))
        model.train()(input_ids=ids).logits.log_softmax(-1)[0, :-1].gather(-1, ids[0, 1:, None]).sum().backward()
        grads.append({n: p.grad for n, p in model.named_parameters() if p.requires_grad})
    assert calls == [1, 2]  # checkpointing recomputed the layer in backward
    assert grads[0] and set(grads[0]) == set(grads[1])
    for name, grad in grads[0].items():
        assert grad is not None and (grads[1][name] - grad).abs().max() <= 1e-6 * grad.abs().max().clamp(min=1e-6), name
