"""``rlxf config show``: the resolved tree with each key's value, default and description; and where the
tiny models are cached (the user cache directory, never the working directory)."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel

from rlxf.checked_config import load_config
from rlxf.cli import main
from rlxf.config import Config
from rlxf.config_reference import _section_type, config_key_exists, describe_config
from rlxf.models.cache_dir import user_cache_dir
from rlxf.models.loading import resolve_model_path


def test_config_show_is_the_resolved_tree_as_yaml(capsys):
    assert main(["config", "show", "recipes/dpo.yaml", "preference.loss.name=ipo", "seed=3"]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out) == load_config("recipes/dpo.yaml", ["preference.loss.name=ipo", "seed=3"]).model_dump(
        mode="json")
    lines = {line.split("#")[0].strip(): line.split("#", 1)[1].strip() for line in out.splitlines()
             if "#" in line and not line.startswith("#")}
    # value, then "* default X" when it differs from the code's default, and the field's description
    assert lines["seed: 3"] == "* default 0 | seeds the model init, the prompt order, sampling and the held-out split"
    assert lines["name: ipo"] == "* default dpo | a PREFERENCE_LOSSES name: dpo, ipo, cdpo, simpo"
    assert lines["max_staleness: 1"].startswith("default 1 | trainer version - oldest token's version")
    assert out.splitlines()[0] == "# recipes/dpo.yaml + preference.loss.name=ipo seed=3"


def test_algorithm_defaults_are_the_chosen_presets():
    text = describe_config(load_config(None, ["algorithm.name=ppo", "algorithm.clip_high=0.3"]))
    assert "  advantage_estimator: gae" in text and "# default gae |" in text  # ppo's own, not grpo's
    assert any(line.startswith("  clip_high: 0.3") and "# * default 0.2 |" in line for line in text.splitlines())


def leaves(model: type[BaseModel], prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for name, field in model.model_fields.items():
        section = _section_type(field.annotation)
        out += leaves(section, f"{prefix}{name}.") if section else [(f"{prefix}{name}", field.description)]
    return out


def test_every_key_has_a_description():
    keys = leaves(Config)
    assert len(keys) > 120
    assert [key for key, description in keys if not description] == []


def test_config_key_exists():
    assert config_key_exists("train.optim.lr") and config_key_exists("data.task_args.anything")
    assert config_key_exists("runtime.placement.rollout")  # placement may be a {role: group} mapping
    assert not config_key_exists("train.stpes") and not config_key_exists("train.steps.more")
    assert not config_key_exists("recipes/dpo")


def test_user_cache_dir_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("RLXF_CACHE_DIR", str(tmp_path / "mine"))
    assert user_cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("RLXF_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == tmp_path / "xdg" / "rlxf"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/is/ignored")  # the XDG spec: only absolute paths count
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert user_cache_dir() == tmp_path / "home" / ".cache" / "rlxf"


def test_tiny_models_are_built_in_the_user_cache_not_the_working_directory(monkeypatch, tmp_path):
    monkeypatch.setenv("RLXF_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    path = Path(resolve_model_path("tiny:default"))
    assert path == tmp_path / "cache" / "models" / "tiny-default"
    assert (path / "config.json").exists() and (path / "tokenizer.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache"]  # no ./.cache
    assert [p.name for p in path.parent.iterdir()] == ["tiny-default"]  # the staging folder was renamed
    assert resolve_model_path("tiny:default") == str(path)  # built once
