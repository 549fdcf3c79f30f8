"""A GGUF file as a model source: dequantized once into a plain safetensors folder, then loaded like any folder.

transformers reads GGUF (``from_pretrained(folder, gguf_file=...)``) but marks such a model as quantized by
"gguf" and refuses to ``save_pretrained`` it, and a config saved by hand still carries that
``quantization_config``, so every checkpoint written later fails. Here the dequantized weights are written
once, with no quantization config, beside the tokenizer (chat template included) and the generation config,
into rlxf's cache under the file's sha256: the folder is built under a temporary name and renamed, so a run
killed half-way leaves no folder that looks finished (the next conversion removes what it staged). Free space is
checked before the weights are written; a write that fails is one ``rlxf:`` line (models/cache_writes.py). Every
checkpoint rlxf writes from it then loads in plain transformers. The weights are the file's (e.g. 4-bit) ones dequantized, not the original model's.
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch

from rlxf.config_error import ConfigError
from rlxf.disk_space import check_free_space
from rlxf.models.cache_writes import built_once, cache_write, content_sha256

GGUF_SUFFIX = ".gguf"
DONE_MARKER = "rlxf_gguf_source.txt"  # written last: a folder without it is not finished

logger = logging.getLogger(__name__)


class GgufSourceError(ConfigError):
    """A ``model.path`` naming a GGUF file that cannot be turned into a model folder; the message says why."""


def is_gguf_source(path: str) -> bool:
    """A ``.gguf`` file, or a folder that holds one and no transformers weights."""
    p = Path(path).expanduser()
    if p.suffix == GGUF_SUFFIX:
        return True
    if not p.is_dir() or (p / "config.json").exists():
        return False
    return any(p.glob(f"*{GGUF_SUFFIX}"))


def gguf_file_of(path: str) -> Path:
    """The one GGUF file ``path`` names (the file itself, or the only one in the folder)."""
    p = Path(path).expanduser()
    if p.suffix == GGUF_SUFFIX:
        if not p.is_file():
            raise GgufSourceError(f"model.path {path!r}: no such GGUF file")
        return p
    found = sorted(p.glob(f"*{GGUF_SUFFIX}"))
    if len(found) != 1:
        raise GgufSourceError(f"model.path {path!r}: the folder holds {len(found)} .gguf files "
                              f"({', '.join(f.name for f in found)}); name the one to use")
    return found[0]


def converted_folder(path: str, cache_root: Path) -> str:
    """The model folder of the GGUF at ``path``: from the cache when this file (by content) was converted
    before, else converted now (tens of seconds for a 135M model)."""
    gguf = gguf_file_of(path)
    if importlib.util.find_spec("gguf") is None:
        raise GgufSourceError(f"model.path {path!r} is a GGUF file; reading it needs the gguf package: "
                              "pip install 'rlxf[gguf]' (or pip install gguf)")
    digest = content_sha256([gguf])
    target = cache_root / f"gguf-{gguf.stem}-{digest[:16]}"

    def build(building: Path) -> str:
        logger.info("rlxf: converting %s to a safetensors folder (once; cached in %s)", gguf, target)
        write_dequantized(gguf, building)
        return f"dequantized from {gguf.name} (sha256 {digest})\n"

    return built_once(target, f"the conversion of {gguf.name}", DONE_MARKER, build)


def write_dequantized(gguf: Path, out_dir: Path) -> None:
    """Model (float32), tokenizer and generation config read from ``gguf``, saved as a plain folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(gguf.parent), gguf.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    except (ValueError, KeyError, NotImplementedError) as error:  # an architecture transformers cannot map
        raise GgufSourceError(f"model.path {str(gguf)!r}: transformers cannot read this GGUF file "
                              f"({type(error).__name__}: {str(error).splitlines()[0][:200]})") from None
    model.hf_quantizer = None  # the weights are dequantized already: nothing quantized is left to refuse saving
    for holder in (model.config, getattr(model, "generation_config", None)):
        if holder is not None and hasattr(holder, "quantization_config"):
            delattr(holder, "quantization_config")
    model.config.name_or_path = str(out_dir)
    from rlxf.models.saving import TOKENIZER_BYTES, save_model, weight_bytes

    what = f"the conversion of {gguf.name}"
    # the tokenizer's files (a BPE vocabulary and merges) are a few MB: counted generously
    check_free_space(out_dir.parent, weight_bytes(model) + 16 * TOKENIZER_BYTES, what)
    with cache_write(f"writing the weights of {what} to {out_dir}"):
        save_model(model, out_dir)
    with cache_write(f"writing the tokenizer files of {what} to {out_dir}"):
        tokenizer.save_pretrained(out_dir)
