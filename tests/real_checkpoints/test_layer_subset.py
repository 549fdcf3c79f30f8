"""``model.path: layers:SPEC:SOURCE``: a model cut to some of its source's decoder layers (models/layer_subset.py)."""

import pytest
import torch

from rlxf.config_error import ConfigError
from rlxf.models.layer_subset import parse_layers
from rlxf.models.loading import load_causal_lm, load_tokenizer, resolve_model_path
from rlxf.models.tiny import build_tiny_model


@pytest.fixture(scope="module")
def three_layers(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("src") / "tiny3", hidden_size=32, num_layers=3,
                                num_heads=2, intermediate_size=64))


def test_layer_specs():
    assert parse_layers("0-2,5", 6) == [0, 1, 2, 5]
    assert parse_layers("4,0", 6) == [4, 0]
    for bad, says in (("0-6", "6 decoder layers"), ("1,1", "each layer once"), ("a-b", "0-based indices"),
                      ("", "0-based indices")):
        with pytest.raises(ConfigError, match=says):
            parse_layers(bad, 6)


def test_the_subset_computes_what_the_source_does_with_those_layers(three_layers, tmp_path):
    folder = resolve_model_path(f"layers:0,2:{three_layers}", work_dir=tmp_path)
    subset, source = load_causal_lm(folder), load_causal_lm(three_layers)
    assert subset.config.num_hidden_layers == 2 and len(subset.model.layers) == 2
    ids = torch.tensor([[3, 5, 7, 9, 4]])
    # the source's forward with its middle layer skipped, by hand
    with torch.no_grad():
        x = source.model.embed_tokens(ids)
        position_ids = torch.arange(ids.shape[1])[None]
        rotary = source.model.rotary_emb(x, position_ids)
        mask = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
        for i in (0, 2):
            x = source.model.layers[i](x, attention_mask=mask, position_embeddings=rotary, position_ids=position_ids)
            x = x[0] if isinstance(x, tuple) else x
        want = source.lm_head(source.model.norm(x))
        got = subset(input_ids=ids).logits
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # the subset's tokenizer is the source's
    assert load_tokenizer(folder).get_vocab() == load_tokenizer(three_layers).get_vocab()
    # built once: the same path gives the same folder without building it again
    marker = next(p for p in tmp_path.iterdir() if p.name.startswith("layers-")) / "rlxf_layer_subset.txt"
    stamp = marker.stat().st_mtime_ns
    assert resolve_model_path(f"layers:0,2:{three_layers}", work_dir=tmp_path) == folder
    assert marker.stat().st_mtime_ns == stamp


def test_another_source_or_spec_gives_another_folder(three_layers, tmp_path):
    first = resolve_model_path(f"layers:0-1:{three_layers}", work_dir=tmp_path)
    assert resolve_model_path(f"layers:1:{three_layers}", work_dir=tmp_path) != first
    model = load_causal_lm(three_layers)
    with torch.no_grad():
        model.model.layers[0].mlp.up_proj.weight.add_(1.0)
    changed = tmp_path / "changed"
    model.save_pretrained(changed)
    load_tokenizer(three_layers).save_pretrained(changed)
    assert resolve_model_path(f"layers:0-1:{changed}", work_dir=tmp_path) != first


def test_bad_subset_paths_say_what_to_write(three_layers, tmp_path):
    with pytest.raises(ConfigError, match="layers:SPEC:SOURCE"):
        resolve_model_path("layers:0-1", work_dir=tmp_path)
    with pytest.raises(ConfigError, match="3 decoder layers"):
        resolve_model_path(f"layers:0-5:{three_layers}", work_dir=tmp_path)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(("layers-", ".layers-"))]  # nothing half-built
