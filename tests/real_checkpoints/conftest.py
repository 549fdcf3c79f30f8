"""Session fixtures: tiny Qwen2 / Mistral / GPT-2 checkpoints saved to disk (see builders.py)."""

from __future__ import annotations

import pytest
import torch

from tests.real_checkpoints.builders import build_checkpoint

ARCHS = ("qwen2", "mistral", "gpt2")


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, str]:
    """arch -> folder. GPT-2 has dropout (0.3, GPT-2's 0.1 made visible); Mistral a sliding window of 8
    tokens, shorter than prompt + response."""
    root = tmp_path_factory.mktemp("real_checkpoints")
    extra = {"gpt2": {"resid_pdrop": 0.3, "embd_pdrop": 0.3, "attn_pdrop": 0.3}}
    return {arch: str(build_checkpoint(root / arch, arch, **extra.get(arch, {}))) for arch in ARCHS}


@pytest.fixture(scope="session")
def bf16_checkpoint(tmp_path_factory) -> str:
    return str(build_checkpoint(tmp_path_factory.mktemp("bf16") / "qwen2", "qwen2", dtype=torch.bfloat16))
