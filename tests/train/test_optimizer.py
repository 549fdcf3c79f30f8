"""The train engine's AdamW kernel, and checkpoints that resume under another kernel."""

import torch

from rlxf.config import OptimConfig
from rlxf.train import checkpoint as ckpt
from rlxf.train.engine import build_optimizer, optimizer_kernel, warmup_schedule


def _trained_optimizer(model, **kernel):
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, **kernel)
    model(torch.ones(2, 3)).sum().backward()
    optimizer.step()
    return optimizer


def test_plain_parameters_get_the_fused_kernel():
    model = torch.nn.Linear(3, 2)
    optimizer = build_optimizer(model, OptimConfig())
    assert optimizer.param_groups[0]["fused"] is True
    assert optimizer_kernel([]) == {"foreach": True}


def test_a_checkpoint_resumes_under_the_loading_optimizers_kernel(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    saved = _trained_optimizer(model, fused=True)
    ckpt.save_optimizer(saved, warmup_schedule(saved, 0), tmp_path, "policy")

    loading = torch.optim.AdamW(model.parameters(), lr=0.5, foreach=True)
    ckpt.load_optimizer(loading, warmup_schedule(loading, 0), tmp_path, "policy")
    group = loading.param_groups[0]
    assert group["foreach"] is True and not group["fused"]  # the loader's kernel
    assert group["lr"] == 0.1  # the checkpoint's hyperparameters
    for p in model.parameters():
        torch.testing.assert_close(loading.state[p]["exp_avg"], saved.state[p]["exp_avg"])
    loading.step()  # and it runs
