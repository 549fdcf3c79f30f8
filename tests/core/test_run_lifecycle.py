"""What a new user meets on the command line when a run is started, resumed or changed (issue 48 items 2, 3, 7,
8 and 10; issue 44 item 2): each refusal or failure is one ``rlxf:`` line with its exit code, no traceback, and
nothing finished is lost or rewritten."""

from __future__ import annotations

import re
import sys

import pytest
import yaml

from rlxf.cli import main
from tests.conftest import small_overrides

QUIET = ["logging.plot=false"]


def run(args: list[str], capsys) -> tuple[int, str, str]:
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlxf: ") and "Traceback" not in err, err
    return lines[0]


def snapshot(folder) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def finished_rl_run(tmp_path, tiny_model_dir, capsys):
    """A finished 2-step GRPO run (no SFT), as ``rlxf train`` leaves it."""
    run_dir = tmp_path / "run"
    code, _, err = run(["train", *small_overrides(run_dir, tiny_model_dir, steps=2), "sft.steps=0", *QUIET], capsys)
    assert code == 0, err
    return run_dir


# item 2: a preset's name and its fields never disagree silently

def test_config_show_output_with_another_algorithm_name_takes_that_preset(tmp_path, capsys):
    code, shown, _ = run(["config", "show", "algorithm.name=ppo"], capsys)
    assert code == 0
    mine = tmp_path / "my.yaml"
    mine.write_text(shown)
    code, shown, _ = run(["config", "show", str(mine), "algorithm.name=grpo"], capsys)
    algorithm = yaml.safe_load(shown)["algorithm"]
    assert code == 0
    assert (algorithm["name"], algorithm["advantage_estimator"], algorithm["use_critic"]) == ("grpo", "grpo", False)
    # a hand-edited name over another preset's fields: refused, naming both
    mine.write_text(shown.replace("  name: grpo ", "  name: ppo  ", 1))
    code, _, err = run(["config", "show", str(mine)], capsys)
    assert code == 2
    assert one_line(err) == ("rlxf: algorithm.name=ppo but every other algorithm field is preset grpo's "
                             "(advantage_estimator=grpo, use_critic=false): remove those fields to train ppo, or "
                             "set algorithm.name=grpo")


def test_a_resume_that_would_add_a_critic_is_refused_and_one_that_changes_the_algorithm_says_so(finished_rl_run,
                                                                                                 capsys):
    before = snapshot(finished_rl_run)
    code, _, err = run(["train", "--resume", str(finished_rl_run), "algorithm.name=ppo", "train.steps=3"], capsys)
    assert code == 2
    assert one_line(err).startswith("rlxf: --resume ") and "algorithm.name=ppo trains a critic" in err
    assert snapshot(finished_rl_run) == before  # config.yaml not rewritten, nothing trained
    code, out, err = run(["train", "--resume", str(finished_rl_run), "algorithm.name=dr_grpo", "train.steps=3",
                          *QUIET], capsys)
    assert code == 0, err
    assert "resuming with changed settings (the steps from the checkpoint on train with these): " in out
    assert "algorithm.name grpo -> dr_grpo" in out and "algorithm.norm_adv_by_std True -> False" in out
    saved = yaml.safe_load((finished_rl_run / "config.yaml").read_text())["algorithm"]
    assert (saved["name"], saved["norm_adv_by_std"]) == ("dr_grpo", False)


@pytest.mark.parametrize("loop, steps", [("sft", "sft.steps=5"), ("dpo", "preference.steps=5")])
def test_a_resume_as_another_loop_is_refused_and_rewrites_nothing(finished_rl_run, loop, steps, capsys):
    """The same class as a preset switch: an RL run's checkpoint cannot continue as an offline loop (it failed
    on a missing optimizer file with a traceback, or named a missing reference folder, after rewriting
    config.yaml with the new loop)."""
    before = snapshot(finished_rl_run)
    code, _, err = run(["train", "--resume", str(finished_rl_run), f"loop={loop}", steps, *QUIET], capsys)
    assert code == 2
    assert one_line(err) == (f"rlxf: --resume {finished_rl_run}: the run was trained by loop rl, and its checkpoints "
                             f"cannot continue as loop {loop}: start a new run from its policy (loop={loop} "
                             "model.path=RUN/checkpoints/step_N/policy)")
    assert snapshot(finished_rl_run) == before


def test_a_resume_of_an_rl_run_by_the_async_rl_loop_goes_on(finished_rl_run, capsys):
    code, out, err = run(["train", "--resume", str(finished_rl_run), "loop=rl_async", "train.steps=3", *QUIET], capsys)
    assert code == 0, err
    assert "loop rl -> rl_async" in out and (finished_rl_run / "checkpoints" / "step_000003").is_dir()


# item 3: a run that fails before its first step leaves the folder as it found it

def test_a_run_that_fails_before_its_first_checkpoint_leaves_the_previous_run(finished_rl_run, tiny_model_dir,
                                                                              capsys):
    before = snapshot(finished_rl_run)
    args = [*small_overrides(finished_rl_run, tiny_model_dir, steps=2), "sft.steps=0", *QUIET,
            "reward.function=tests.core.test_run_errors:raising_reward"]  # fails in the step-0 evaluation
    code, _, err = run(["train", *args], capsys)
    assert code == 1
    assert one_line(err).startswith("rlxf: reward 'tests.core.test_run_errors:raising_reward' raised KeyError")
    assert snapshot(finished_rl_run) == before
    assert sorted(p.name for p in finished_rl_run.parent.iterdir()) == ["run"]  # no run.old-* left beside it


def test_a_fresh_run_that_fails_before_its_first_checkpoint_leaves_no_folder(tmp_path, tiny_model_dir, capsys):
    run_dir = tmp_path / "new"
    args = [*small_overrides(run_dir, tiny_model_dir), "sft.steps=2", *QUIET,
            "reward.function=tests.core.test_run_errors:raising_reward"]
    code, _, err = run(["train", *args], capsys)
    assert code == 1 and one_line(err)
    assert not run_dir.exists()


# item 7: a resume with nothing to train says so and rewrites nothing

@pytest.mark.parametrize("steps", [2, 1])
def test_a_resume_with_nothing_to_train_is_refused_and_rewrites_nothing(finished_rl_run, steps, capsys):
    before = snapshot(finished_rl_run)
    code, _, err = run(["train", "--resume", str(finished_rl_run), f"train.steps={steps}"], capsys)
    assert code == 2
    assert one_line(err) == (f"rlxf: --resume {finished_rl_run}: nothing to train: its last checkpoint is step 2 and "
                             f"train.steps={steps}; to train on, give more steps (train.steps={2 + steps})")
    assert snapshot(finished_rl_run) == before  # config.yaml's steps, summary.json's peak_rss_mb as they were


def test_an_offline_resume_with_nothing_to_train_names_its_own_key(tmp_path, tiny_model_dir, capsys):
    run_dir = tmp_path / "sft"
    code, _, err = run(["train", "loop=sft", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", "sft.steps=2",
                        "sft.batch_size=8", "data.eval_size=16", "logging.progress_bar=false", *QUIET], capsys)
    assert code == 0, err
    before = snapshot(run_dir)
    code, _, err = run(["train", "--resume", str(run_dir)], capsys)
    assert code == 2
    assert one_line(err) == (f"rlxf: --resume {run_dir}: nothing to train: its last checkpoint is step 2 and "
                             "sft.steps=2; to train on, give more steps (sft.steps=4)")
    assert snapshot(run_dir) == before


# item 8: train.steps is refused for a loop that counts its steps with another key; --help's example counts

@pytest.mark.parametrize("recipe, key", [("dpo", "preference.steps"), ("sft", "sft.steps"),
                                         ("reward_model", "preference.steps")])
def test_train_steps_on_an_offline_loop_names_the_key_that_counts(recipe, key, tmp_path, capsys):
    run_dir = tmp_path / "run"
    code, _, err = run(["train", f"src/rlxf/recipes/{recipe}.yaml", "train.steps=4", f"run_dir={run_dir}"], capsys)
    assert code == 2
    assert one_line(err) == (f"rlxf: train.steps=4: loop {recipe} counts its steps with {key} (train.steps is the "
                             f"RL loops'): write {key}=4")
    assert not run_dir.exists()


def test_the_help_example_for_an_offline_recipe_sets_the_steps_it_runs(capsys):
    from rlxf.checked_config import load_config, refuse_foreign_steps
    from rlxf.loops import steps_of

    with pytest.raises(SystemExit):
        main(["--help"])
    examples = re.findall(r"^  rlxf train (\S+\.yaml .*?)\s*(?:#.*)?$", capsys.readouterr().out, re.M)
    assert examples
    for example in examples:
        recipe, *overrides = example.split()
        config = load_config(recipe, overrides)
        refuse_foreign_steps(config, overrides)  # would raise for an ignored key
        given = dict(o.split("=", 1) for o in overrides)
        assert any(k.endswith(".steps") for k in given), example
        assert [int(v) for k, v in given.items() if k.endswith(".steps")] == [steps_of(config)], example


# item 10: rlxf eval --n 0 blames --n; a group-relative estimator with one sample per prompt is refused

def test_eval_with_no_samples_blames_n(capsys):
    code, _, err = run(["eval", "--n", "0"], capsys)
    assert code == 2
    assert one_line(err) == "rlxf: --n 0: samples per problem must be at least 1"


@pytest.mark.parametrize("estimator", ["grpo", "rloo"])
def test_one_sample_per_prompt_with_a_group_baseline_is_refused(estimator, tmp_path, capsys):
    code, _, err = run(["train", "rollout.n_samples=1", f"algorithm.advantage_estimator={estimator}",
                        "train.mini_batch_size=16", "train.micro_batch_size=16", f"run_dir={tmp_path / 'r'}"], capsys)
    assert code == 2
    assert one_line(err).startswith(f"rlxf: algorithm.advantage_estimator={estimator} compares each response with "
                                    "the other samples of its prompt: with rollout.n_samples=1 every advantage is 0")
    assert not (tmp_path / "r").exists()


# issue 44 item 2: a run whose every agent fails stops after env.max_failed_steps such steps in a row

def test_a_run_whose_every_agent_fails_stops_with_the_first_reason(tmp_path, tiny_model_dir, capsys):
    run_dir = tmp_path / "agents"
    command = f"env.kwargs.command=[{sys.executable}, -c, 'import no_such_module_for_the_agent']"
    code, out, err = run(["train", "src/rlxf/recipes/openai_agent.yaml", f"run_dir={run_dir}",
                          f"model.path={tiny_model_dir}", "sft.steps=0", "train.steps=10", "train.prompts_per_step=2",
                          "rollout.n_samples=2", "train.mini_batch_size=4", "train.micro_batch_size=4",
                          "data.eval_size=2", "eval.every=0", "checkpoint.every=1", "logging.progress_bar=false",
                          "env.kwargs.agent=null", command, "env.max_failed_steps=2", *QUIET], capsys)
    assert code == 1
    assert "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("rlxf:")]
    assert len(errors) == 1  # the steps' "warning: N of M agents failed" lines are not errors of the run
    last = [line for line in err.splitlines() if line.strip()][-1]
    assert last == errors[0] and last.startswith("rlxf: every trajectory failed before it was scored in 2 steps in a row (steps 1-2, "
                           "env.max_failed_steps=2): nothing to learn from, the run stops; the first failure: agent ")
    assert "ModuleNotFoundError: No module named 'no_such_module_for_the_agent'" in last
    # the step that tripped it was not trained: the run is kept at the step before
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["step_000000", "step_000001"]
    assert not (run_dir / "summary.json").exists()
