"""Issue 48, items 4-6, through the real command line (``rlxf`` in a subprocess): a folder that cannot be
written, a value that passed the start-up checks and failed later, a server port that is taken or out of
range — each is exactly one ``rlxf:`` line on stderr, no traceback, the documented exit code, and nothing
created or lost (a previous run stays where it was, no folder or database appears)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import small_overrides

RECIPES = Path(__file__).parents[2] / "recipes"

# Replaces real read-only folders where neither chmod (root) nor a read-only bind mount can make them: every
# mkdir under the folder fails as a read-only file system does, and os.access says so.
READ_ONLY_PREAMBLE = """
import errno, os, sys
RO = os.path.abspath(sys.argv.pop(1))
def _ro(path):
    path = os.path.abspath(os.fspath(path))
    return path == RO or path.startswith(RO + os.sep)
_mkdir, _access = os.mkdir, os.access
def mkdir(path, *args, **kwargs):
    if _ro(path):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(path))
    return _mkdir(path, *args, **kwargs)
os.mkdir = mkdir
os.access = lambda path, mode, **kw: False if mode & os.W_OK and _ro(path) else _access(path, mode, **kw)
"""


def rlxf(args: list[str], cwd: Path, read_only: Path | None = None, timeout: float = 180) -> subprocess.CompletedProcess:
    """``rlxf ARGS`` in ``cwd``; ``read_only``: a folder made read-only by injection (see ``read_only``)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    env.pop("RLXF_DEBUG", None)
    if read_only is None:
        command = [sys.executable, "-m", "rlxf.cli", *args]
    else:
        runner = READ_ONLY_PREAMBLE + "from rlxf.cli import main\nsys.exit(main(sys.argv[1:]))\n"
        command = [sys.executable, "-c", runner, str(read_only), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def one_rlxf_line(done: subprocess.CompletedProcess, exit_code: int) -> str:
    """The one ``rlxf:`` line of a command that failed with ``exit_code``, no traceback."""
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == exit_code, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlxf: "), done.stderr[-3000:]
    return lines[0]


def tree(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*")}


@contextlib.contextmanager
def read_only(folder: Path):
    """``folder`` read-only for real (chmod, or a read-only bind mount for root), yielding None; or, where
    neither works, yielding the folder for ``rlxf(read_only=...)`` to inject the read-only file system."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            yield None
        finally:
            folder.chmod(0o755)
        return
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True).returncode == 0
    if mounted and subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], capture_output=True).returncode:
        subprocess.run(["umount", str(folder)], check=True)
        mounted = False
    try:
        yield None if mounted else folder
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=True)


@pytest.fixture
def fast(tmp_path, tiny_model_dir) -> list[str]:
    return [*small_overrides(tmp_path / "run", tiny_model_dir, steps=1), "sft.steps=0", "logging.plot=false",
            "data.eval_size=4", "eval.batch_size=4"]


# ---- 4. checkpoint and run folders that cannot be written -------------------------------------------------

@pytest.mark.parametrize("where", ["run_dir_is_a_file", "parent_is_a_file", "parent_is_read_only"])
def test_a_run_folder_that_cannot_be_written_is_one_line_naming_it(where, tmp_path, fast):
    blocker = tmp_path / "blocker"
    if where == "parent_is_read_only":
        blocker.mkdir()
        run_dir = blocker / "run"
    else:
        blocker.write_text("a file the user keeps\n")
        run_dir = blocker if where == "run_dir_is_a_file" else blocker / "run"
    before = tree(tmp_path)
    with read_only(blocker) if where == "parent_is_read_only" else contextlib.nullcontext() as injected:
        done = rlxf(["train", *fast, f"run_dir={run_dir}"], tmp_path, read_only=injected)
    line = one_rlxf_line(done, 2)
    assert line.startswith(f"rlxf: run_dir {run_dir}: cannot be ")
    assert tree(tmp_path) == before  # nothing created, nothing moved
    if blocker.is_file():
        assert blocker.read_text() == "a file the user keeps\n"


def test_a_read_only_checkpoints_folder_is_one_line_naming_the_checkpoint(tmp_path, fast):
    from rlxf.checked_config import load_config
    from rlxf.config import dump_config

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "config.yaml").write_text(dump_config(load_config(None, fast)))
    with read_only(run_dir / "checkpoints") as injected:
        done = rlxf(["train", "--resume", str(run_dir)], tmp_path, read_only=injected)
    line = one_rlxf_line(done, 1)
    assert line.startswith(f"rlxf: writing checkpoint step 0 to {run_dir / 'checkpoints' / 'step_000000.tmp'} "
                           "failed (")
    assert list((run_dir / "checkpoints").iterdir()) == []


def test_an_eval_out_folder_that_cannot_be_made_is_refused_before_the_evaluation(tmp_path, fast):
    (tmp_path / "a_file").write_text("x")
    done = rlxf(["eval", *fast, "--n", "1", "--quiet", "--out", str(tmp_path / "a_file" / "eval")], tmp_path)
    assert one_rlxf_line(done, 2).startswith(f"rlxf: --out {tmp_path / 'a_file' / 'eval'}: cannot be a folder")


# ---- 5. values that passed the start-up checks and failed later -------------------------------------------

def _cuda_index_missing() -> str:
    return f"model.device=cuda:{torch.cuda.device_count() + 63}"


# case -> (recipe or None, overrides, what the one line says)
LATE_VALUES = {
    "digits_not_a_number": (None, ["data.task_args.digits=abc"], "rlxf: data.task_args.digits='abc': "),
    "digits_leave_no_training_rows": (None, ["data.task_args.digits=1", "data.eval_size=200"],
                                      "rlxf: data.eval_size=200 holds out all 100 problems"),
    "unknown_operator": (None, ["data.task_args.ops=x"], "rlxf: data.task_args.ops='x': unknown operators"),
    "sloppy_teacher_out_of_range": (None, ["data.task_args.sloppy_teacher=5"],
                                    "rlxf: data.task_args.sloppy_teacher=5: must be in [0, 1]"),
    "tool_arithmetic_size": ("tool_use.yaml", ["data.task_args.size=abc"], "rlxf: data.task_args.size='abc': "),
    "env_name": ("tool_use.yaml", ["env.name=tool_usee"], "rlxf: unknown env.name 'tool_usee'; known: "),
    "env_kwarg_unknown": ("tool_use.yaml", ["env.kwargs.foo=1"], "rlxf: env.kwargs.foo: ToolUseEnv takes no keyword"),
    "env_kwarg_type": ("tool_use.yaml", ["env.kwargs.max_calls=many"], "rlxf: env.kwargs.max_calls='many': "),
    "model_path_empty": (None, ["model.path="], "rlxf: config key 'model.path': is empty"),
    "run_dir_empty": (None, ["run_dir="], "rlxf: config key 'run_dir': must name a run folder"),
    "run_dir_dot": (None, ["run_dir=."], "rlxf: config key 'run_dir': must name a run folder"),
    "device_torch_lacks": (None, ["model.device=cuda" if not torch.cuda.is_available() else _cuda_index_missing()],
                           "rlxf: model.device=cuda"),
    "device_not_a_device": (None, ["model.device=gpu"], "rlxf: model.device='gpu' is not a device name"),
    # the same class, cases the issue did not list (an outside audit)
    "question_unknown_field": (None, ["data.task_args.question=What is {a} {zzz} {b}?"],
                               "rlxf: data.task_args.question='What is {a} {zzz} {b}?': unknown field {zzz}"),
    "digits_past_memory": (None, ["data.task_args.b_digits=7"],
                           "rlxf: data.task_args.digits=3, b_digits=7: 10,000,000,000 rows would be built"),
    "tool_size_past_memory": ("tool_use.yaml", ["data.task_args.size=100000000"],
                              "rlxf: data.task_args.size=100000000 with data.eval_size=4: 100,000,004 rows"),
    "preferences_task_arg_unknown": (None, ["data.task=arithmetic_preferences", "data.task_args.foo=1"],
                                     "rlxf: data.task_args.foo: arithmetic_task takes no keyword 'foo'"),
    "env_kwarg_unknown_tool": ("tool_use.yaml", ["env.kwargs.tools=[nosuch]"],
                               "rlxf: env.name=tool_use with env.kwargs "),
    "engine_option_unknown": (None, ["rollout.engine_options.foo=1"],
                              "rlxf: rollout.engine_options.foo: TorchRolloutEngine takes no keyword 'foo'"),
    "engine_option_value": (None, ["rollout.engine_options.dtype=float99"],
                            "rlxf: rollout.engine_options.dtype 'float99' is not one of"),
    "adam_betas": (None, ["train.optim.betas=[2,0.9]"], "rlxf: config key 'train.optim.betas.0': Input should be"),
    "grad_clip_negative": (None, ["sft.optim.grad_clip=-1"], "rlxf: config key 'sft.optim.grad_clip': Input should"),
}
if importlib.util.find_spec("vllm") is None:
    LATE_VALUES["engine_not_installed"] = (None, ["rollout.engine=vllm"], "rlxf: rollout.engine=vllm needs the vllm")


@pytest.mark.parametrize("case", LATE_VALUES)
def test_a_value_that_would_fail_later_is_one_line_at_start_up(case, tmp_path, fast):
    recipe, overrides, starts = LATE_VALUES[case]
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "finished.txt").write_text("a finished run's file\n")  # a previous run: must stay where it is
    args = [str(RECIPES / recipe)] if recipe else []
    done = rlxf(["train", *args, *fast, *overrides], tmp_path)
    assert one_rlxf_line(done, 2).startswith(starts)
    assert tree(tmp_path) == {"run", "run/finished.txt"}


def test_a_run_folder_given_as_the_recipe_says_to_resume_it(tmp_path, fast):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 0\n")
    done = rlxf(["train", str(run_dir)], tmp_path)
    assert one_rlxf_line(done, 2) == (f"rlxf: recipe {str(run_dir)!r} is a run folder: rlxf train --resume "
                                      f"{run_dir} continues it, {run_dir / 'config.yaml'} is its recipe")
    assert tree(tmp_path) == {"run", "run/config.yaml"}


@pytest.fixture
def checkpoint_folder(tmp_path, tiny_model_dir) -> Path:
    """A finished run's checkpoint as rlxf writes it: the model in ``policy/`` beside the trainer's files."""
    checkpoint = tmp_path / "done" / "checkpoints" / "step_000001"
    shutil.copytree(tiny_model_dir, checkpoint / "policy")
    (checkpoint / "state.json").write_text("{}")
    return checkpoint


def test_a_checkpoint_folder_is_accepted_as_the_model_to_evaluate(tmp_path, fast, checkpoint_folder):
    done = rlxf(["eval", *fast, "--model", str(checkpoint_folder), "--n", "1", "--quiet", "--out",
                 str(tmp_path / "eval")], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "eval" / "eval.json").exists()


def test_a_checkpoint_folder_is_accepted_as_model_path(tmp_path, fast, checkpoint_folder):
    done = rlxf(["train", *fast, f"model.path={checkpoint_folder}", "train.steps=0"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "summary.json").exists()


@pytest.mark.parametrize("what", ["a_file", "no_tokenizer", "no_weights", "damaged_config"])
def test_a_model_folder_transformers_cannot_load_is_one_line_naming_it(what, tmp_path, fast, tiny_model_dir):
    model = tmp_path / "model"
    if what == "a_file":
        model.write_text("not a model\n")
    else:
        shutil.copytree(tiny_model_dir, model)
        doomed = {"no_tokenizer": "tokenizer*", "no_weights": "*.safetensors", "damaged_config": "-"}[what]
        for path in model.glob(doomed):
            path.unlink()
        if what == "damaged_config":
            (model / "config.json").write_text("{")
    before = tree(tmp_path)
    commands = [["train", *fast, f"model.path={model}"]]
    if what != "no_tokenizer":  # eval reads the recipe's tokenizer, and only the weights of --model
        commands.append(["eval", *fast, "--model", str(model), "--n", "1", "--quiet", "--out", str(tmp_path / "eval")])
    for command in commands:
        line = one_rlxf_line(rlxf(command, tmp_path), 2)
        assert line.startswith(f"rlxf: model path {str(model)!r}"), line
        assert {"a_file": "is a file", "no_tokenizer": "holds no tokenizer files", "no_weights": "holds no model files",
                "damaged_config": "not a valid JSON"}[what] in line
        assert tree(tmp_path) == before


def test_a_run_folder_as_the_model_names_its_checkpoint(tmp_path, fast, checkpoint_folder):
    run_dir = checkpoint_folder.parents[1]
    done = rlxf(["eval", *fast, "--model", str(run_dir), "--n", "1", "--quiet", "--out", str(tmp_path / "eval")],
                tmp_path)
    assert one_rlxf_line(done, 2) == (f"rlxf: model path {str(run_dir)!r} is a run folder, not a model: give one "
                                      f"of its checkpoints' policy folder, e.g. {checkpoint_folder / 'policy'}")
    assert not (tmp_path / "eval").exists()


# ---- 6. servers and ports ----------------------------------------------------------------------------------

@pytest.fixture
def taken_port():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        yield holder.getsockname()[1]


def test_serve_reward_on_a_taken_port_is_one_line(tmp_path, taken_port):
    done = rlxf(["serve-reward", "--port", str(taken_port)], tmp_path)
    line = one_rlxf_line(done, 2)
    assert f"--port {taken_port}: 127.0.0.1:{taken_port} is already in use" in line
    assert "serving" not in done.stdout


def test_serve_reward_on_a_port_out_of_range_is_one_line(tmp_path):
    done = rlxf(["serve-reward", "--port", "99999"], tmp_path)
    assert "--port 99999: a port is 0 to 65535" in one_rlxf_line(done, 2)


def test_studio_on_a_taken_port_says_so_without_showing_a_url(tmp_path, taken_port):
    pytest.importorskip("uvicorn")
    done = rlxf(["studio", str(tmp_path / "runs"), "--port", str(taken_port)], tmp_path)
    assert f"--port {taken_port}: 127.0.0.1:{taken_port} is already in use" in one_rlxf_line(done, 2)
    assert "open http" not in done.stdout
    assert tree(tmp_path) == set()


@pytest.mark.parametrize("campaign", ["abc", "1"])
def test_studio_export_of_nothing_creates_nothing(campaign, tmp_path):
    done = rlxf(["studio", str(tmp_path / "runs"), "--export", campaign, str(tmp_path / "out" / "prefs.jsonl")],
                tmp_path)
    line = one_rlxf_line(done, 2)
    assert line.startswith(f"rlxf: studio --export {campaign}: ")
    assert tree(tmp_path) == set()


# ---- 4. the same class on the other commands: sweep --out, studio RUNS_DIR / --db, plot --output ----------

@pytest.fixture
def blockers(tmp_path):
    """A file where a folder is expected, and a read-only folder (or the folder to inject as read-only)."""
    (tmp_path / "a_file").write_text("the user's file\n")
    (tmp_path / "locked").mkdir()
    with read_only(tmp_path / "locked") as injected:
        yield tmp_path / "a_file", tmp_path / "locked", injected


@pytest.mark.parametrize("where", ["is_a_file", "under_a_file", "read_only"])
def test_sweep_out_that_cannot_be_written_is_refused_before_any_seed(where, tmp_path, fast, blockers):
    a_file, locked, injected = blockers
    out = {"is_a_file": a_file, "under_a_file": a_file / "sweep", "read_only": locked / "sweep"}[where]
    before = tree(tmp_path)
    done = rlxf(["sweep", *fast, "--seeds", "1", "--out", str(out)], tmp_path,
                read_only=injected if where == "read_only" else None)
    assert one_rlxf_line(done, 2).startswith(f"rlxf: --out {out}: cannot be ")
    assert tree(tmp_path) == before and a_file.read_text() == "the user's file\n"


@pytest.mark.parametrize("where", ["runs_is_a_file", "db_under_a_file", "runs_read_only", "db_not_a_database"])
def test_studio_folders_that_cannot_be_used_are_one_line(where, tmp_path, blockers):
    pytest.importorskip("uvicorn")
    a_file, locked, injected = blockers
    runs, db = {"runs_is_a_file": (a_file, None), "db_under_a_file": (tmp_path / "runs", a_file / "s.sqlite"),
                "runs_read_only": (locked, None), "db_not_a_database": (locked, a_file)}[where]
    before = tree(tmp_path)
    done = rlxf(["studio", str(runs), "--port", "0", *(["--db", str(db)] if db else [])], tmp_path,
                read_only=injected if where == "runs_read_only" else None, timeout=60)
    line = one_rlxf_line(done, 2)
    assert line.startswith({"runs_is_a_file": f"rlxf: studio {runs}: RUNS_DIR is a file",
                            "db_under_a_file": f"rlxf: studio: the label store {db} cannot be made",
                            "runs_read_only": f"rlxf: studio: the label store {locked / 'studio.sqlite'} cannot be",
                            "db_not_a_database": f"rlxf: studio: the label store {db} cannot be opened"}[where]), line
    assert "open http" not in done.stdout
    assert tree(tmp_path) == before and a_file.read_text() == "the user's file\n"


@pytest.mark.parametrize("where", ["under_a_file", "read_only"])
def test_plot_output_that_cannot_be_written_is_one_line(where, tmp_path, blockers):
    a_file, locked, injected = blockers
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.5}\n')
    out = (a_file if where == "under_a_file" else locked) / "p.png"
    before = tree(tmp_path)
    done = rlxf(["plot", str(run), "--output", str(out)], tmp_path,
                read_only=injected if where == "read_only" else None)
    assert one_rlxf_line(done, 2).startswith(f"rlxf: --output's folder {out.parent}: cannot be ")
    assert tree(tmp_path) == before


# ---- issue 48 item 9's class: a sweep that cannot run a seed says so before any seed, or names the failure ----

def test_a_sweep_with_train_steps_on_an_offline_recipe_is_refused_before_any_seed(tmp_path):
    done = rlxf(["sweep", str(RECIPES / "dpo.yaml"), "train.steps=3", "--seeds", "2", "--out", str(tmp_path / "sw")],
                tmp_path)
    assert one_rlxf_line(done, 2).startswith("rlxf: train.steps=3: loop dpo counts its steps with preference.steps")
    assert tree(tmp_path) == set()


def test_a_sweep_whose_seed_fails_gives_the_seeds_reason_in_one_line(tmp_path, fast):
    unreachable = ["reward.function=remote", "reward.kwargs.url=http://127.0.0.1:1", "reward.kwargs.backoff_seconds=0.01"]
    done = rlxf(["sweep", *fast, *unreachable, "--seeds", "1", "--no-plot", "--out", str(tmp_path / "sw")], tmp_path)
    line = one_rlxf_line(done, 1)
    assert line.startswith("rlxf: sweep: 1 of 1 seeds failed; seed 0 (exit 1): reward 'remote' raised"), line
    assert "not started yet" not in done.stdout and "seed 0 failed (exit 1)" in done.stdout


def test_python_dash_m_rlxf_is_the_rlxf_command(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    done = subprocess.run([sys.executable, "-m", "rlxf", "train", "train.stpes=3"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert one_rlxf_line(done, 2) == "rlxf: unknown config key 'train.stpes'"


def test_a_run_whose_every_agent_fails_ends_with_exactly_one_rlxf_line(tmp_path, fast):
    """Issue 44 item 2 through the command line: the steps' "N of M agents failed" lines are warnings, the run's
    error is the one ``rlxf:`` line, exit 1, and the run is kept at the step before the one that tripped it."""
    done = rlxf(["train", str(RECIPES / "openai_agent.yaml"), *fast, "train.steps=10", "env.kwargs.agent=null",
                 "env.kwargs.command=[no_such_agent_program_xyz]", "env.max_failed_steps=2", "train.prompts_per_step=2",
                 "rollout.n_samples=2", "train.mini_batch_size=4", "train.micro_batch_size=4"], tmp_path)
    errors = [line for line in done.stderr.splitlines() if line.startswith("rlxf:")]
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert len(errors) == 1 and errors[0].startswith("rlxf: every trajectory failed before it was scored in 2 steps")
    assert "no_such_agent_program_xyz" in errors[0]
    assert "warning: 4 of 4 agents failed" in done.stderr  # 2 prompts x 2 samples a step
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step_000000", "step_000001"]


def test_a_warning_before_an_error_is_not_a_second_rlxf_line(tmp_path, fast):
    """Switching data.task drops the recipe's task_args with a warning; the error that follows is still the
    one ``rlxf:`` line."""
    (tmp_path / "a_file").write_text("x\n")
    done = rlxf(["train", *fast, "data.task=tool_arithmetic", f"model.path={tmp_path / 'a_file'}"], tmp_path)
    assert "warning: dropped the recipe's data.task_args" in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("rlxf:")]
    assert done.returncode == 2 and "Traceback" not in done.stderr and len(errors) == 1, done.stderr[-3000:]
    assert errors[0].startswith(f"rlxf: model path {str(tmp_path / 'a_file')!r} is a file")
