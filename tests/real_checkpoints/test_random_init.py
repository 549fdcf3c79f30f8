"""``model.path: random:SOURCE``: SOURCE's architecture and tokenizer with weights drawn anew
(models/random_init.py)."""

import pytest
import torch

from rlxf.config_error import ConfigError
from rlxf.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
from rlxf.models.tiny import build_tiny_model


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """A 3-layer tiny model whose weights are not an initialisation's (the tiny builder draws them with seed 0
    too): every parameter moved by 0.5, as training would move them."""
    folder = tmp_path_factory.mktemp("src") / "tiny3"
    build_tiny_model(folder, hidden_size=32, num_layers=3, num_heads=2, intermediate_size=64)
    model = load_causal_lm(str(folder))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.5)
    model.save_pretrained(folder)
    return str(folder)


def test_same_architecture_and_tokenizer_new_weights_at_the_configs_scale(source, tmp_path):
    folder = resolve_model_path(f"random:{source}", work_dir=tmp_path)
    fresh, trained = load_causal_lm(folder), load_causal_lm(source)
    assert fresh.config.to_diff_dict() | {"_name_or_path": None} == trained.config.to_diff_dict() | {"_name_or_path": None}
    assert load_tokenizer(folder).get_vocab() == load_tokenizer(source).get_vocab()
    for (name, new), (_, old) in zip(fresh.named_parameters(), trained.named_parameters()):
        assert new.shape == old.shape, name
        if new.dim() == 2:  # linear and embedding weights: N(0, initializer_range), none of the source's
            assert not torch.equal(new, old), name
            assert abs(new.std().item() - fresh.config.initializer_range) < 0.2 * fresh.config.initializer_range, name
        else:  # RMSNorm weights start at one
            assert torch.equal(new, torch.ones_like(new)), name


def test_one_draw_built_once_and_the_callers_random_state_untouched(source, tmp_path):
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    first = resolve_model_path(f"random:{source}", work_dir=tmp_path / "a")
    assert torch.equal(torch.rand(3), expected_next)
    second = resolve_model_path(f"random:{source}", work_dir=tmp_path / "b")  # another cache: the same draw
    for a, b in zip(load_causal_lm(first).parameters(), load_causal_lm(second).parameters()):
        assert torch.equal(a, b)
    marker = next((tmp_path / "a").glob("random-*/rlxf_random_init.txt"))
    stamp = marker.stat().st_mtime_ns
    assert resolve_model_path(f"random:{source}", work_dir=tmp_path / "a") == first
    assert marker.stat().st_mtime_ns == stamp


def test_composes_with_a_layer_cut_for_a_smaller_student(source, tmp_path):
    folder = resolve_model_path(f"random:layers:0-1:{source}", work_dir=tmp_path)
    model = load_causal_lm(folder)
    assert model.config.num_hidden_layers == 2 and len(model.model.layers) == 2
    ids = torch.tensor([[3, 5, 7]])
    assert model(input_ids=ids).logits.shape == (1, 3, model.config.vocab_size)


def test_a_bare_prefix_is_refused_with_the_form_to_write(tmp_path):
    with pytest.raises(ConfigError, match="write random:SOURCE"):
        resolve_model_path("random:", work_dir=tmp_path)
