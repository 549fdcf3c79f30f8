"""A smaller model cut from a bigger one: some of its decoder layers, the rest of it as is.

``model.path: layers:SPEC:SOURCE`` (e.g. ``layers:0-23:smollm2:135m-instruct``, ``layers:0-19,29:runs/x/...``)
is SOURCE (any ``model.path``) with only the decoder layers SPEC names (0-based, ranges inclusive, in the order
given), renumbered from 0; the embedding, final norm, LM head, tokenizer and chat template are SOURCE's. That is
how a student of the teacher's own tokenizer is made for distillation (DistilBERT kept one layer in two of its
teacher; depth pruning keeps a contiguous block), and it is a cut, not a trained model: it needs training to
speak again. The folder is built once into rlxf's cache, named by the spec and the source's weights (sha256), so
a source that changes gives a new folder, and staged then renamed as every cached model is.
"""

from __future__ import annotations

import re
from pathlib import Path

from rlxf.config_error import ConfigError
from rlxf.disk_space import check_free_space
from rlxf.models.cache_writes import built_once, cache_write, content_sha256

LAYERS_PREFIX = "layers:"
DONE_MARKER = "rlxf_layer_subset.txt"  # written last: a folder without it is not finished
_SPEC = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")


class LayerSubsetError(ConfigError):
    """A ``layers:SPEC:SOURCE`` model path that names no usable subset; the message says why."""


def is_layer_subset(path: str) -> bool:
    return path.startswith(LAYERS_PREFIX)


def parse_layers(spec: str, available: int, path: str | None = None) -> list[int]:
    """The layer indices ``spec`` names ("0-23", "0-19,29"), checked against a model of ``available`` layers
    (``path``: the model path the spec came from, for the messages)."""
    where = f"model.path {path!r}" if path else f"layers:{spec}"
    if not _SPEC.match(spec):
        raise LayerSubsetError(f"{where}: give decoder layers as 0-based indices and inclusive ranges, "
                               "e.g. layers:0-23:SOURCE or layers:0-19,29:SOURCE")
    layers: list[int] = []
    for part in spec.split(","):
        first, _, last = part.partition("-")
        layers.extend(range(int(first), int(last or first) + 1))
    if any(i >= available for i in layers):
        raise LayerSubsetError(f"{where}: the source has {available} decoder layers (0-{available - 1})")
    if len(set(layers)) != len(layers) or not layers:
        raise LayerSubsetError(f"{where}: each layer once, at least one")
    return layers


def split_path(path: str) -> tuple[str, str]:
    """(spec, source) of ``layers:SPEC:SOURCE``."""
    spec, _, source = path[len(LAYERS_PREFIX):].partition(":")
    if not source:
        raise LayerSubsetError(f"model.path {path!r}: write layers:SPEC:SOURCE, e.g. layers:0-23:smollm2:135m-instruct")
    return spec, source


def layer_subset_folder(path: str, cache_root: Path, resolve) -> str:
    """The model folder of ``layers:SPEC:SOURCE``, built now unless the cache holds it. ``resolve`` turns SOURCE
    into a folder (``loading.resolve_model_path``)."""
    spec, source = split_path(path)
    source_folder = Path(resolve(source))
    weights = sorted(source_folder.glob("*.safetensors"))
    if not weights:
        raise LayerSubsetError(f"model.path {path!r}: {source_folder} holds no safetensors weights to cut from")
    digest = content_sha256(weights, prefix=spec.encode())
    target = cache_root / f"layers-{spec.replace(',', '_')}-{source_folder.name}-{digest[:16]}"

    def build(building: Path) -> str:
        write_layer_subset(source_folder, spec, building, path)
        return f"decoder layers {spec} of {source} ({source_folder})\n"

    return built_once(target, f"the layer subset {path}", DONE_MARKER, build)


def write_layer_subset(source_folder: Path, spec: str, out_dir: Path, path: str | None = None) -> None:
    """Source's model with only the layers ``spec`` names, and its tokenizer, saved into ``out_dir``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlxf.models.saving import TOKENIZER_BYTES, save_model, weight_bytes

    model = AutoModelForCausalLM.from_pretrained(source_folder, dtype="auto")
    decoder = model.get_decoder()
    blocks = getattr(decoder, "layers", None)
    if not isinstance(blocks, torch.nn.ModuleList):
        raise LayerSubsetError(f"model.path {path or spec!r}: {type(model).__name__} keeps no decoder.layers list to cut")
    layers = parse_layers(spec, len(blocks), path)
    decoder.layers = torch.nn.ModuleList(blocks[i] for i in layers)
    for number, block in enumerate(decoder.layers):  # the KV cache is indexed by the layer's position
        if hasattr(getattr(block, "self_attn", None), "layer_idx"):
            block.self_attn.layer_idx = number
    config = model.config
    config.num_hidden_layers = len(layers)
    if getattr(config, "layer_types", None):
        config.layer_types = [config.layer_types[i] for i in layers]
    config.name_or_path = str(out_dir)
    what = f"the layer subset {spec} of {source_folder}"
    check_free_space(out_dir.parent, weight_bytes(model) + 16 * TOKENIZER_BYTES, what)
    with cache_write(f"writing {what} to {out_dir}"):
        save_model(model, out_dir)
        AutoTokenizer.from_pretrained(source_folder).save_pretrained(out_dir)
