"""The engine's one autocast region per mini-batch (train/engine.py): each weight is cast to bf16 once per
optimizer step instead of once per micro-batch, with bit-for-bit the gradients of a region per micro-batch."""

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import LlamaConfig, LlamaForCausalLM

from rlxf.train.engine import TrainEngine
from rlxf.train.optim_config import OptimConfig
from rlxf.train.precision import autocast


def llama() -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
    return LlamaForCausalLM(config)


def micro_batches() -> list[torch.Tensor]:
    return list(torch.randint(0, 97, (3, 2, 7), generator=torch.Generator().manual_seed(1)))


def loss_of(model):
    def loss(ids):
        logits = model(input_ids=ids).logits.float()
        return -torch.log_softmax(logits[:, :-1], -1).gather(-1, ids[:, 1:, None]).mean(), {}
    return loss


class WeightCasts(TorchDispatchMode):
    """Counts fp32 -> bf16 copies of [16, 16] tensors: the q and o projections of ``llama()`` (k and v are
    [8, 16], the MLP's [32, 16] and [16, 32])."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if (func is torch.ops.aten._to_copy.default and args[0].dtype == torch.float32
                and kwargs.get("dtype") == torch.bfloat16 and tuple(args[0].shape) == (16, 16)):
            self.count += 1
        return func(*args, **kwargs)


def test_one_autocast_region_casts_each_weight_once_a_step_and_gives_the_same_gradients():
    model = llama()
    ids_list = micro_batches()
    with WeightCasts() as per_micro:  # the engine's loop before: a region around each micro-batch's forward
        for ids in ids_list:
            with autocast(model, "bfloat16"):
                loss = loss_of(model)(ids)[0]
            loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    engine = TrainEngine(model, OptimConfig(lr=1e-3, grad_clip=None, autocast="bfloat16"))
    with WeightCasts() as one_region:
        metrics = engine.optimizer_step(ids_list, loss_of(model))
    # q and o of 2 layers: 4 casts a forward, once per step instead of once per micro-batch (3 of them)
    assert (per_micro.count, one_region.count) == (12, 4)
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, expected[name]), name  # the same bf16 copies, so the same bits
    assert metrics["skipped_nonfinite"] == 0.0


def test_the_next_step_casts_the_updated_weights_again():
    model = llama()
    engine = TrainEngine(model, OptimConfig(lr=1e-2, grad_clip=None, autocast="bfloat16"))
    engine.optimizer_step(micro_batches(), loss_of(model))
    model.zero_grad(set_to_none=True)
    for ids in micro_batches():  # a region per micro-batch over the updated weights: the reference
        with autocast(model, "bfloat16"):
            loss = loss_of(model)(ids)[0]
        loss.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters()}
    with WeightCasts() as second:
        engine.optimizer_step(micro_batches(), loss_of(model))  # its gradients stay in .grad (no clip)
    assert second.count == 4  # the first step's copies were dropped with its region: cast anew
    for name, p in model.named_parameters():
        assert torch.equal(p.grad, expected[name]), name  # stale bf16 copies would give other gradients
