import pytest

from rlxf.checked_config import load_config
from rlxf.config import ConfigError, parse_override


def test_default_recipe_loads():
    config = load_config()
    assert config.algorithm.name == "grpo"
    assert config.algorithm.advantage_estimator == "grpo"
    assert config.rollout.n_samples == 8


def test_one_override_switches_to_ppo():
    config = load_config(None, ["algorithm.name=ppo"])
    assert config.algorithm.advantage_estimator == "gae"
    assert config.algorithm.use_critic is True


def test_overrides_are_typed():
    assert parse_override("train.optim.lr=3e-4") == (["train", "optim", "lr"], 3e-4)
    assert parse_override("logging.sinks=[jsonl]") == (["logging", "sinks"], ["jsonl"])
    config = load_config(None, ["train.steps=7", "rollout.temperature=0.5"])
    assert config.train.steps == 7 and config.rollout.temperature == 0.5


def test_unknown_key_is_named():
    with pytest.raises(ConfigError, match=r"unknown config key 'train\.stpes'"):
        load_config(None, ["train.stpes=3"])
    with pytest.raises(ConfigError, match=r"unknown config key 'algorithm\.klcoef'"):
        load_config(None, ["algorithm.klcoef=0.1"])


def test_bad_value_is_named():
    with pytest.raises(ConfigError, match=r"config key 'rollout\.temperature'.*'hot'"):
        load_config(None, ["rollout.temperature=hot"])
    with pytest.raises(ConfigError, match=r"train\.steps"):
        load_config(None, ["train.steps=-1"])


def test_unknown_preset_is_named():
    with pytest.raises(ConfigError, match="nope"):
        load_config(None, ["algorithm.name=nope"])


def test_batch_sizes_must_divide():
    with pytest.raises(ConfigError, match="mini_batch_size"):
        load_config(None, ["train.mini_batch_size=100"])


def test_missing_recipe_and_malformed_override(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="key.path=value"):
        load_config(None, ["train.steps"])


def test_unknown_loop_is_named():
    with pytest.raises(ConfigError, match=r"config key 'loop'.*unknown loop 'nope'"):
        load_config(None, ["loop=nope"])
