"""The docs are true: every fenced command and YAML snippet in README.md and docs/*.md is parsed and checked.

* ``rlxf ...`` lines parse with the real argparse parser; their recipe and overrides load through the real
  config (keys, values, combinations); paths they name exist in the repository or are produced by a recipe
  or a ``rlxf train`` line of the docs (``runs/NAME/checkpoints/step_N/policy`` only when that run keeps
  step N). The cheap ones run: ``rlxf algorithms``, ``rlxf config show``, ``--help``, ``--version``.
* ``make``, ``pip install`` and ``python benchmarks/...`` lines: the target, the extra, the script and its
  flags exist.
* YAML snippets whose keys are config sections validate as a recipe; python blocks compile; JSON parses.

Placeholders are written in capitals (``RECIPE.yaml``, ``CKPT_A``); ``[...]`` marks an optional part.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from rlxf.checked_config import build_config, load_config
from rlxf.cli import _split_recipe, main, parse_command_line
from rlxf.config import DEFAULT_RECIPE, Config

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYPROJECT = (ROOT / "pyproject.toml").read_text()  # read with re: tomllib is Python 3.11+
RECIPES = sorted((ROOT / "src" / "rlxf" / "recipes").glob("*.yaml"))
REPO_DIRS = ("recipes/", "src/", "benchmarks/", "docs/", "tests/")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.[a-z]+)?$")
# What a placeholder stands for where the config needs a value of the right type.
PLACEHOLDER_VALUES = {"EXPORT": "prefs.jsonl", "EVAL_SIZE": "40", "CHECKPOINT": "/models/checkpoint"}
CHEAP = {"algorithms", "config"}  # subcommands that run in well under a second
MODEL_FOLDER = {"reward_model": "reward_model"}  # what a loop's checkpoints hold (default: policy/)
STEPS_OF = {"rl": "train", "rl_async": "train", "sft": "sft", "dpo": "preference", "online_dpo": "preference",
            "reward_model": "preference"}


@dataclass
class Block:
    path: Path
    line: int
    lang: str
    text: str

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def fenced_blocks() -> list[Block]:
    blocks = []
    for path in DOCS:
        text = path.read_text()
        for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.M | re.S):
            blocks.append(Block(path, text[: m.start()].count("\n") + 1, m.group(1), m.group(2)))
    return blocks


BLOCKS = fenced_blocks()
SHELL = [b for b in BLOCKS if b.lang in ("bash", "")]
YAML = [b for b in BLOCKS if b.lang == "yaml"]


def command_lines(block: Block) -> list[list[str]]:
    """The block's shell commands as argument lists: continuations joined, comments and ``[...]`` removed,
    leading ``VAR=value`` assignments dropped. Lines of diagrams and output come back too; callers
    look only at the commands they know."""
    joined = re.sub(r"\\\n", " ", block.text)
    commands = []
    for line in joined.splitlines():
        line = re.sub(r"(?<=\s)\[[^\]]*\]", "", line)  # synopsis: [RECIPE.yaml] [key=value ...]
        try:
            words = shlex.split(line, comments=True)
        except ValueError:  # a diagram's unbalanced quote
            continue
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words = words[1:]
        if words:
            commands.append(words)
    return commands


def rlxf_commands() -> list[tuple[Block, list[str]]]:
    return [(b, words[1:]) for b in SHELL for words in command_lines(b) if words[0] == "rlxf"]


def snippet_recipes(tmp_dir: Path) -> dict[str, Path]:
    """YAML snippets that name their file in a first comment line (``# my_recipe.yaml``), written out."""
    named = {}
    for block in YAML:
        first = block.text.splitlines()[0]
        if re.match(r"^# [\w.-]+\.yaml$", first):
            (tmp_dir / first[2:]).write_text(block.text)
            named[first[2:]] = tmp_dir / first[2:]
    return named


def with_placeholders_filled(args: list[str]) -> list[str]:
    out = []
    for arg in args:
        key, eq, value = arg.partition("=")
        if eq and PLACEHOLDER.match(value):
            assert value in PLACEHOLDER_VALUES, f"placeholder {value}: add what it stands for to PLACEHOLDER_VALUES"
            arg = f"{key}={PLACEHOLDER_VALUES[value]}"
        out.append(arg)
    return out


def resolve(ns_args: list[str], recipes: dict[str, Path]) -> Config:
    recipe, overrides = _split_recipe(with_placeholders_filled(ns_args))
    if recipe is not None and PLACEHOLDER.match(recipe):
        recipe = None
    recipe = recipes.get(recipe, recipe)
    return load_config(recipe, overrides)


def produced_by(config: Config) -> set[str]:
    """The run directory and the checkpoint folders a finished run of ``config`` leaves behind."""
    section = getattr(config, STEPS_OF[config.loop])
    steps, every, keep = section.steps, config.checkpoint.every, config.checkpoint.keep_last
    saved = sorted({0, steps, *(range(every, steps + 1, every) if every else ())})[-keep:]
    folder = MODEL_FOLDER.get(config.loop, "policy")
    run_dir = config.run_dir.rstrip("/")
    return {run_dir, *(f"{run_dir}/checkpoints/step_{s:06d}/{folder}" for s in saved)}


@pytest.fixture(scope="module")
def recipes(tmp_path_factory) -> dict[str, Path]:
    return snippet_recipes(tmp_path_factory.mktemp("snippets"))


@pytest.fixture(scope="module")
def produced(recipes) -> set[str]:
    out = {"runs"}
    for recipe in RECIPES:
        out |= produced_by(load_config(recipe))
    for _, args in rlxf_commands():
        if args[0] != "train":
            continue
        try:
            ns = parse_command_line(args)
            out |= set() if ns.resume else produced_by(resolve(ns.args, recipes))
        except (SystemExit, ValueError, AssertionError):  # that line's own test names what is wrong
            continue
    return out


def check_path(value: str, produced: set[str], where: str) -> None:
    if value.startswith("runs/") or value == "runs":
        assert value.rstrip("/") in produced, f"{where}: {value} is made by no recipe or `rlxf train` line of the docs"
    elif value.startswith(REPO_DIRS):
        assert (ROOT / value).exists(), f"{where}: {value} does not exist"


def strings_in(tree) -> list[str]:
    if isinstance(tree, dict):
        return [s for v in tree.values() for s in strings_in(v)]
    if isinstance(tree, list):
        return [s for v in tree for s in strings_in(v)]
    return [tree] if isinstance(tree, str) else []


@pytest.fixture(autouse=True)
def _at_repo_root(monkeypatch):
    monkeypatch.chdir(ROOT)  # the docs' relative paths (recipes/dpo.yaml) are relative to the repository


@pytest.mark.parametrize(("block", "args"), rlxf_commands(), ids=lambda x: str(x) if isinstance(x, Block) else "")
def test_rlxf_command_parses_loads_and_names_real_paths(block, args, recipes, produced, capsys):
    where = f"{block}: rlxf {' '.join(args)}"
    try:
        ns = parse_command_line(args)
    except SystemExit as stop:
        if args and args[0] in ("--help", "--version", "-h") or "--help" in args:
            assert stop.code == 0, where
            return
        pytest.fail(f"{where}: argparse refused it: {capsys.readouterr().err.strip()}")
    if hasattr(ns, "args"):
        config = resolve(ns.args, recipes)
        for value in strings_in(config.model_dump(mode="json")):
            check_path(value, produced, where)
    for value in [*(ns.model or [] if ns.command == "eval" else []), *(getattr(ns, "run_dirs", None) or []),
                  *([ns.resume] if getattr(ns, "resume", None) else [])]:
        if not PLACEHOLDER.match(value):
            check_path(value, produced, where)
    if ns.command in CHEAP:
        assert main(args) == 0, where


def test_the_docs_show_the_commands_this_test_runs():
    """Guards the test itself: it found the command lines, the snippets and the cheap commands."""
    commands = [args for _, args in rlxf_commands()]
    assert len(commands) >= 30 and len(YAML) >= 12
    assert ["algorithms"] in commands and ["--version"] in commands
    assert any(args[:2] == ["config", "show"] for args in commands)


@pytest.mark.parametrize("block", YAML, ids=str)
def test_yaml_snippet_is_a_valid_config_fragment(block, produced):
    tree = yaml.safe_load(block.text)
    assert isinstance(tree, dict), f"{block}: not a mapping"
    assert set(tree) <= set(Config.model_fields), f"{block}: {sorted(set(tree) - set(Config.model_fields))} " \
                                                  "are not config sections"
    build_config(tree)
    for value in strings_in(tree):
        check_path(value, produced, str(block))


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_names_only_paths_that_exist_or_a_recipe_makes(recipe, produced):
    for value in strings_in(yaml.safe_load(recipe.read_text())):
        check_path(value, produced, recipe.name)


def other_commands(first_words: tuple[str, ...]) -> list[tuple[Block, list[str]]]:
    return [(b, w) for b in SHELL for w in command_lines(b) if w[0] in first_words]


@pytest.mark.parametrize(("block", "words"), other_commands(("make",)), ids=str)
def test_make_target_exists(block, words):
    makefile = (ROOT / "Makefile").read_text()
    targets = re.findall(r"^([\w-]+):", makefile, re.M)
    variables = [w.split("=", 1)[0] for w in words[1:] if "=" in w]  # make VAR=value: a variable the Makefile reads
    assert set(w for w in words[1:] if "=" not in w) <= set(targets), f"{block}: make {' '.join(words[1:])}"
    assert all(f"$({v})" in makefile for v in variables), f"{block}: a variable the Makefile does not read"


@pytest.mark.parametrize(("block", "words"), other_commands(("pip", ".venv/bin/pip")), ids=str)
def test_pip_extra_exists(block, words):
    extras = PYPROJECT.split("[project.optional-dependencies]")[1].split("\n[")[0]
    extras = set(re.findall(r"^([\w-]+) = \[", extras, re.M))
    for word in words[2:]:
        for extra in re.findall(r"\[([\w,-]+)\]", word):
            assert set(extra.split(",")) <= set(extras), f"{block}: no extra {extra} in pyproject.toml"


@pytest.mark.parametrize(("block", "words"), other_commands(("python", ".venv/bin/python")), ids=str)
def test_benchmark_script_and_its_flags_exist(block, words):
    script = ROOT / words[1]
    assert script.exists(), f"{block}: {words[1]} does not exist"
    flags = set(re.findall(r"[\"'](--[\w-]+)[\"']", script.read_text()))
    used = {w.split("=")[0] for w in words[2:] if w.startswith("--")}
    assert used <= flags, f"{block}: {words[1]} has no {sorted(used - flags)}"


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.lang in ("python", "json")], ids=str)
def test_python_compiles_and_json_parses(block):
    if block.lang == "json":
        json.loads(block.text)
    else:
        compile(block.text, str(block), "exec")


def test_the_stated_minimum_versions_are_those_of_pyproject():
    readme = (ROOT / "README.md").read_text()
    for name in ("torch", "transformers"):
        pin = re.search(rf'^    "({name}>=[\d.]+)"', PYPROJECT, re.M).group(1)
        assert f"`{pin}`" in readme, f"README does not state {pin}"


def test_default_recipe_claims_in_the_readme():
    """The numbers README's walk-through quotes are the default recipe's."""
    config = load_config(DEFAULT_RECIPE)
    readme = (ROOT / "README.md").read_text()
    assert f"Every {config.eval.every} steps" in readme
    assert f"answers {config.data.eval_size} held-out problems" in readme
    assert f"step_{config.train.steps:06d}/policy" in readme


def test_quick_start_times_are_the_recorded_ones():
    """The quick start's minutes are those tools/measure_quick_start.py last recorded (issue 35: the README said
    4 minutes for a suite that took 11)."""
    record = json.loads((ROOT / "docs" / "quick_start_times.json").read_text())
    readme = (ROOT / "README.md").read_text()
    train = re.search(r"^make train .*\(about (\d+) minutes? on 2 CPU cores, (\d+) with set-up\)$", readme, re.M)
    test = re.search(r"^make test .*\(about (\d+) minutes on 2 CPU cores, with set-up\)$", readme, re.M)
    assert train and test, "the quick start no longer states its times in the form this test reads"
    assert int(train.group(1)) == round(record["make_train"]["run_seconds"] / 60)
    assert int(train.group(2)) == round(record["make_train"]["with_setup_seconds"] / 60)
    assert int(test.group(1)) == round(record["make_test"]["with_setup_seconds"] / 60)
    assert "docs/quick_start_times.json" in readme


# A recipe's header states its measured figures in one form (issue 44: smollm2_grpo.yaml's header described
# the recipe before it changed): ``# Measured (docs/FILE.md#SECTION): METRIC START -> FINAL, ...`` (the line
# may wrap). SECTION is the GitHub anchor of the docs heading whose table holds the figures.
MEASURED = re.compile(r"Measured \((docs/[\w.-]+\.md)#([\w-]+)\): [^\d]*?(\d+\.\d+) -> (\d+\.\d+)")


def recipe_header(recipe: Path) -> str:
    lines = []
    for line in recipe.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line.lstrip("# ").strip())
    return " ".join(lines)


def heading_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def doc_sections(path: Path) -> dict[str, str]:
    """Anchor -> the text under that heading, up to the next heading of its level or above."""
    sections, open_ = {}, []
    for line in path.read_text().splitlines():
        heading = re.match(r"^(#+) (.*)", line)
        if heading:
            level = len(heading.group(1))
            open_ = [(lvl, anchor) for lvl, anchor in open_ if lvl < level]
            open_.append((level, heading_anchor(heading.group(2))))
            sections.setdefault(open_[-1][1], "")
        for _, anchor in open_:
            sections[anchor] += line + "\n"
    return sections


def leading_number(cell: str) -> float | None:
    found = re.match(r"[\s*]*([+-]?\d+(?:\.\d+)?)", cell)
    return float(found.group(1)) if found else None


MEASURED_RECIPES = [r for r in RECIPES if MEASURED.search(recipe_header(r))]


def test_the_recipes_with_docs_tables_state_their_figures_in_the_checked_form():
    assert {r.name for r in MEASURED_RECIPES} >= {"smollm2_grpo.yaml", "smollm2_grpo_lora.yaml", "tool_use.yaml",
                                                  "reasoning_gym.yaml", "grpo_reward_model.yaml", "distill.yaml",
                                                  "grm.yaml"}


@pytest.mark.parametrize("recipe", MEASURED_RECIPES, ids=lambda r: r.name)
def test_a_recipes_measured_start_and_final_are_those_of_its_docs_table(recipe):
    """The section the header names exists, names the recipe, and one row of its tables holds the stated
    starting figure and, in a later column, the final one."""
    doc, anchor, start, final = MEASURED.search(recipe_header(recipe)).groups()
    sections = doc_sections(ROOT / doc)
    assert anchor in sections, f"{recipe.name}: {doc} has no heading with the anchor #{anchor}"
    section = sections[anchor]
    assert recipe.name in section, f"{recipe.name}: {doc}#{anchor} does not name the recipe"
    rows = [[leading_number(cell) for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.lstrip().startswith("|")]
    assert any(float(start) in row and float(final) in row[row.index(float(start)) + 1:] for row in rows), (
        f"{recipe.name}: no row of {doc}#{anchor}'s tables goes from {start} to {final}")
