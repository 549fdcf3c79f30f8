"""The command line explains itself: each mistake is one ``rlxf:`` line naming the key or file and what to
do (exit code 2), ``--help`` has examples and points to the config reference, ``--version`` answers."""

from __future__ import annotations

import re

import pytest

from rlxf.cli import main, parse_command_line
from tests.conftest import small_overrides

COMMANDS = ("train", "eval", "plot", "serve-reward", "sweep", "prune", "studio", "algorithms", "config")


def run(args: list[str], capsys) -> tuple[int, str]:
    """Exit code and stderr of ``rlxf ARGS``; the error must be a single ``rlxf:`` line, not a traceback."""
    code = main(args)
    err = capsys.readouterr().err
    return code, err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("rlxf: "), err
    return lines[0]


@pytest.mark.parametrize("command", [None, *COMMANDS, "config show"])
def test_help_has_an_example_and_points_to_the_config_reference(command, capsys):
    with pytest.raises(SystemExit) as stop:
        main([*(command.split() if command else []), "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    example = re.search(r"^examples:\n  (rlxf .+)$", out, re.M)
    assert example, out
    assert "rlxf config show [RECIPE.yaml] [key=value ...]" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert re.fullmatch(r"rlxf \d+\.\d+\.\d+\S* \(python 3\.\d+\.\d+, torch \S+, transformers \S+\)\n",
                        capsys.readouterr().out)


def test_recipe_with_a_yaml_syntax_error_names_file_and_line(tmp_path, capsys):
    recipe = tmp_path / "broken.yaml"
    recipe.write_text("seed: 0\ntrain:\n  steps: [1\n  prompts_per_step: 4\n")
    code, err = run(["train", str(recipe)], capsys)
    assert code == 2
    assert one_line(err) == f"rlxf: recipe {recipe}: YAML syntax error at line 4, column 19: expected ',' or ']', but got ':'"


def test_an_override_without_a_value_is_not_taken_for_a_recipe(capsys):
    code, err = run(["train", "train.steps"], capsys)
    assert code == 2
    assert one_line(err) == ("rlxf: override 'train.steps' has no value: write train.steps=VALUE "
                             "(rlxf config show lists the keys)")
    code, err = run(["train", "recipes/dpo.yaml", "preference.steps"], capsys)  # after a recipe
    assert code == 2 and "override 'preference.steps' has no value: write preference.steps=VALUE" in one_line(err)


def test_a_value_that_is_not_yaml_names_its_key(capsys):
    code, err = run(["train", "logging.sinks=[jsonl"], capsys)
    assert code == 2
    assert one_line(err).startswith("rlxf: override logging.sinks: the value '[jsonl' is not valid YAML")


@pytest.mark.parametrize("download", ["false", "true"])
def test_a_model_path_that_does_not_exist_says_so(tmp_path, download, capsys):
    missing = tmp_path / "no-such-model"
    code, err = run(["train", f"model.path={missing}", f"model.allow_download={download}",
                     f"run_dir={tmp_path / 'run'}"], capsys)
    assert code == 2
    assert one_line(err) == (f"rlxf: model.path '{missing}' does not exist: give a model folder, a .gguf file, a "
                             "name in the HF cache (org/name), tiny:NAME, layers:SPEC:SOURCE, random:SOURCE or "
                             "smollm2:135m-instruct")


def test_an_unknown_tiny_model_lists_the_known_ones(tmp_path, capsys):
    code, err = run(["train", "model.path=tiny:huge", f"run_dir={tmp_path / 'run'}"], capsys)
    assert code == 2
    assert one_line(err) == "rlxf: model.path 'tiny:huge': unknown tiny model; known: tiny:default, tiny:long"


def test_switching_the_task_drops_the_recipes_foreign_task_args_with_a_warning(tmp_path, capsys, caplog):
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"prompt": "1+1=", "answer": "2"}\n')
    assert main(["config", "show", "data.task=file", f"data.path={rows}"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  task_args: \{\} ", out, re.M)
    assert [r.getMessage() for r in caplog.records] == [
        "warning: dropped the recipe's data.task_args b_digits, digits, ops, sloppy_teacher: written for task "
        "arithmetic, not taken by task file"]


def test_task_args_the_user_gives_are_checked(tmp_path, capsys):
    code, err = run(["train", "data.task_args.digitz=3"], capsys)
    assert code == 2
    assert one_line(err) == ("rlxf: data.task_args digitz: task 'arithmetic' does not take them (it takes: b_digits, "
                             "digits, ops, question, reverse, sloppy_teacher); remove them from data.task_args")
    code, err = run(["train", "data.task=file", "data.task_args={digits: 2}", "data.path=x.jsonl"], capsys)
    assert code == 2 and "data.task_args digits: task 'file' does not take them (it takes: none)" in one_line(err)
    code, err = run(["train", "data.task=file"], capsys)
    assert code == 2 and one_line(err).endswith("data.task=file reads its rows from data.path: set data.path=FILE.jsonl")


def test_an_unknown_reward_is_refused_at_load_listing_the_known_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLXF_CACHE_DIR", str(tmp_path / "cache"))
    code, err = run(["train", "reward.function=nosuchreward", f"run_dir={tmp_path / 'run'}"], capsys)
    assert code == 2
    line = one_line(err)
    assert line.startswith("rlxf: config key 'reward.function': unknown reward 'nosuchreward'; known: arithmetic, ")
    assert ", math, " in line and line.endswith("(or a dotted path module:attr)")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "run").exists()  # refused before any building


def test_an_unsupported_combination_says_what_to_change(capsys):
    code, err = run(["train", "loop=rl_async", "algorithm.name=dapo"], capsys)
    assert code == 2
    assert one_line(err) == (
        "rlxf: loop=rl_async does not support algorithm.dynamic_sampling=True, which algorithm.name=dapo turns on "
        "(its producer pauses generation between decode steps to load new weights); set "
        "algorithm.dynamic_sampling=false, or use loop=rl")


def test_overrides_may_follow_the_options():
    ns = parse_command_line(["eval", "recipes/dpo.yaml", "--model", "m", "rollout.max_new_tokens=8", "--n", "2"])
    assert ns.args == ["recipes/dpo.yaml", "rollout.max_new_tokens=8"] and ns.model == ["m"] and ns.n == 2
    for stray in (["eval", "recipes/dpo.yaml", "--n", "2", "stray"], ["algorithms", "train.steps=3"]):
        with pytest.raises(SystemExit):
            parse_command_line(stray)


def raising_reward(prompts, responses, metadata):
    return [float(m["no_such_field"]) for m in metadata]


def test_a_reward_that_raises_stops_the_run_with_one_line(tmp_path, tiny_model_dir, capsys):
    overrides = small_overrides(tmp_path / "run", tiny_model_dir, steps=1)
    code, err = run(["train", *overrides, "sft.steps=0", "logging.plot=false",
                     "reward.function=tests.core.test_cli_errors:raising_reward"], capsys)
    assert code == 1
    assert one_line(err) == ("rlxf: reward 'tests.core.test_cli_errors:raising_reward' raised KeyError: "
                             "'no_such_field'")
