"""Load any causal LM and its tokenizer the way transformers does (local path or HF cache).

Offline by default: only a local folder or the HF cache is read (``local_files_only``); a download
happens only with ``model.allow_download: true``. The weights keep the checkpoint's dtype unless
``model.dtype`` names another (``auto``, the default, is what transformers' ``dtype="auto"`` does).
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase

from rlxf.config_error import ConfigError
from rlxf.models.cache_dir import user_cache_dir
from rlxf.models.gguf_source import converted_folder, is_gguf_source
from rlxf.models.layer_subset import is_layer_subset, layer_subset_folder
from rlxf.models.packaged_models import PACKAGED_MODELS, is_packaged_model, packaged_model_file
from rlxf.models.random_init import is_random_init, random_init_folder
from rlxf.models.tiny import TINY_VARIANTS, build_tiny_model
from rlxf.models.tokenizer_files import remember_original_padding

# A model path of this form builds (once) and uses the local tiny model: no download.
TINY_PREFIX = "tiny:"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

logger = logging.getLogger(__name__)


class ModelNotLocalError(ConfigError):
    """A model path that is neither a folder nor in the HF cache, while downloads are off."""


class ModelFolderError(ConfigError):
    """A local model folder transformers cannot load (no weights, no tokenizer files, a damaged config.json)."""


# What a loadable folder holds, by what transformers reads from it: without any of these the library's own
# error is misleading ("You need to have sentencepiece or tiktoken installed", "Repo id must be ...").
FOLDER_FILES = {
    "tokenizer": ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json", "vocab.txt"),
    "model": ("*.safetensors", "pytorch_model*.bin", "*.gguf"),
}


def _load_failure(path: str, allow_download: bool, what: str, error: Exception) -> Exception:
    """The error to raise when transformers cannot load ``what`` (model or tokenizer) from ``path``: a miss
    while offline, or, for a local folder, one line naming the folder and what it lacks; else ``error``."""
    offline = _offline_guard(path, allow_download, what)
    if offline is not None or not Path(path).is_dir():
        return offline or error
    if not any(any(Path(path).glob(pattern)) for pattern in FOLDER_FILES[what]):
        why = f"it holds no {what} files ({', '.join(FOLDER_FILES[what])})"
    else:
        why = f"transformers cannot read its {what}: {(str(error).strip().splitlines() or [type(error).__name__])[0]}"
    return ModelFolderError(f"model path {path!r}: {why}; give a model folder (as save_pretrained writes one) "
                            "or a checkpoint's policy folder")


def _offline_guard(path: str, allow_download: bool, what: str):
    """The ``from_pretrained`` error of an offline miss, as one message naming the path and the switch."""
    if allow_download or Path(path).exists():
        return None
    return ModelNotLocalError(
        f"model.path {path!r}: no such folder and no {what} in the HF cache; rlxf reads models offline "
        "(set model.allow_download=true to let transformers download it)"
    )


def resolve_model_path(path: str, work_dir: str | Path | None = None) -> str:
    """The folder transformers loads for ``model.path``: the first source in ``MODEL_SOURCES`` that
    recognises the path turns it into one (``work_dir``: where built models go; default the user cache,
    models/cache_dir.py); a local path that does not exist is refused here, before transformers reads it
    as a hub name ("Repo id must use alphanumeric chars"); anything else is passed through."""
    folder = Path(work_dir) if work_dir is not None else user_cache_dir() / "models"
    for recognises, resolve in MODEL_SOURCES:
        if recognises(path):
            return resolve(path, folder)
    if looks_like_local_path(path) and not Path(path).exists():
        raise ModelNotLocalError(f"model.path {path!r} does not exist: give a model folder, a .gguf file, a name "
                                 f"in the HF cache (org/name), tiny:NAME, layers:SPEC:SOURCE, random:SOURCE or {' / '.join(PACKAGED_MODELS)}")
    if Path(path).is_dir() and not (Path(path) / "config.json").exists():
        return model_folder_in(Path(path))
    if Path(path).is_file():  # transformers would read it as a hub name ("Repo id must be ...") or a config
        raise ModelNotLocalError(f"model path {path!r} is a file, not a model folder: give the folder that holds "
                                 "its config.json (a checkpoint's policy folder), or a .gguf file")
    return path


def model_folder_in(folder: Path) -> str:
    """The model inside a folder rlxf wrote that is not itself a model folder: a checkpoint's ``policy/``
    (or its one other model, e.g. ``reward_model/``) is taken; a run folder or anything else is refused,
    saying which folder to give (transformers would fail on it with a misleading message)."""
    inside = sorted(p for p in folder.iterdir() if (p / "config.json").is_file())
    chosen = next((p for p in inside if p.name == "policy"), inside[0] if len(inside) == 1 else None)
    if chosen is not None:
        return str(chosen)
    checkpoints = sorted((folder / "checkpoints").glob("step_*/policy"))
    if checkpoints:
        raise ConfigError(f"model path {str(folder)!r} is a run folder, not a model: give one of its checkpoints' "
                          f"policy folder, e.g. {checkpoints[-1]}")
    if inside:
        raise ConfigError(f"model path {str(folder)!r} holds several models ({', '.join(p.name for p in inside)}): "
                          "give one of them")
    raise ConfigError(f"model path {str(folder)!r} is not a model folder (no config.json there); give a model or "
                      "checkpoint folder (RUN_DIR/checkpoints/step_N)")


def _tiny_model(path: str, folder: Path) -> str:
    """``tiny:NAME``: a local tiny model folder, built on first use."""
    name = path[len(TINY_PREFIX):] or "default"
    if name not in TINY_VARIANTS:
        raise ConfigError(f"model.path {path!r}: unknown tiny model; known: "
                          + ", ".join(TINY_PREFIX + n for n in TINY_VARIANTS))
    return str(build_tiny_model(folder / f"tiny-{name}", **TINY_VARIANTS[name]))


# (recognises the path, turns it into a model folder), tried in order.
MODEL_SOURCES = [
    (is_layer_subset, lambda path, folder: layer_subset_folder(path, folder, lambda s: resolve_model_path(s, folder))),
    (is_random_init, lambda path, folder: random_init_folder(path, folder, lambda s: resolve_model_path(s, folder))),
    (lambda path: path.startswith(TINY_PREFIX), _tiny_model),
    (is_packaged_model, lambda path, folder: converted_folder(packaged_model_file(path), folder)),
    (is_gguf_source, converted_folder),
]


def is_model_source(path: str) -> bool:
    """``path`` names a model that a source of ``MODEL_SOURCES`` builds (tiny:NAME, a packaged name, a .gguf)."""
    return any(recognises(path) for recognises, _ in MODEL_SOURCES)


def looks_like_local_path(path: str) -> bool:
    """A filesystem path, not a hub name: absolute, ``./`` / ``../`` / ``~``, or more than one ``/``
    (a hub name is ``org/name``)."""
    return Path(path).is_absolute() or path.startswith((".", "~")) or path.count("/") > 1


def load_tokenizer(path: str, allow_download: bool = False) -> PreTrainedTokenizerBase:
    """The tokenizer, left-padding; one without a pad token pads with EOS (logged). Saved policies keep
    the original tokenizer files and record rlxf's padding beside them (models/tokenizer_files.py)."""
    path = resolve_model_path(path)  # a .gguf or packaged name given directly (e.g. rlxf eval --model)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=not allow_download)
    except (OSError, ValueError) as error:
        raise _load_failure(path, allow_download, "tokenizer", error) from error
    remember_original_padding(tokenizer)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
        logger.warning(
            "tokenizer of %s has no pad_token: rlxf pads with its eos_token %r (saved policies keep the "
            "original tokenizer files; the choice is in rlxf_padding.json)",
            path, tokenizer.eos_token,
        )
    tokenizer.padding_side = "left"
    return tokenizer


def load_causal_lm(
    path: str, dtype: str = "auto", device: str = "cpu", allow_download: bool = False
) -> torch.nn.Module:
    """``dtype``: ``auto`` keeps the checkpoint's (``config.dtype``), else one of ``DTYPES``."""
    path = resolve_model_path(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype="auto" if dtype == "auto" else DTYPES[dtype], local_files_only=not allow_download
        )
    except (OSError, ValueError) as error:
        raise _load_failure(path, allow_download, "model", error) from error
    return model.to(device)
