"""A model of another's architecture and tokenizer with its weights drawn anew: a student trained from scratch.

``model.path: random:SOURCE`` (e.g. ``random:smollm2:135m-instruct``, ``random:layers:0-3:smollm2:135m-instruct``
for four layers of that architecture) is SOURCE's config, tokenizer and chat template with every weight
initialised by transformers as ``from_config`` does for that model class (normal with the config's
``initializer_range``, norms at one), under torch seed ``INIT_SEED``: nothing of SOURCE's training is kept. That
is the from-scratch student of on-policy distillation: it shares the teacher's tokenizer (so the teacher scores
its tokens) and nothing else. The folder is built once into rlxf's cache, named by the source's config and
tokenizer files, and staged then renamed as every cached model is. Its run seed changes the data order and
sampling, not the initial weights (one draw, so every seed starts from the same model, as a shipped model would).
"""

from __future__ import annotations

from pathlib import Path

from rlxf.config_error import ConfigError
from rlxf.disk_space import check_free_space
from rlxf.models.cache_writes import built_once, cache_write, content_sha256

RANDOM_PREFIX = "random:"
DONE_MARKER = "rlxf_random_init.txt"  # written last: a folder without it is not finished
INIT_SEED = 0
# what makes the architecture and tokenizer: the weights of SOURCE are never read
IDENTITY_FILES = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def is_random_init(path: str) -> bool:
    return path.startswith(RANDOM_PREFIX)


def random_init_folder(path: str, cache_root: Path, resolve) -> str:
    """The model folder of ``random:SOURCE``, built now unless the cache holds it. ``resolve`` turns SOURCE into
    a folder (``loading.resolve_model_path``)."""
    source = path[len(RANDOM_PREFIX):]
    if not source:
        raise ConfigError(f"model.path {path!r}: write random:SOURCE, e.g. random:smollm2:135m-instruct")
    source_folder = Path(resolve(source))
    if not (source_folder / "config.json").is_file():
        raise ConfigError(f"model.path {path!r}: {source_folder} holds no config.json to take the architecture from")
    identity = [source_folder / name for name in IDENTITY_FILES if (source_folder / name).is_file()]
    digest = content_sha256(identity, prefix=f"random-init seed {INIT_SEED}".encode())
    target = cache_root / f"random-{source_folder.name}-{digest[:16]}"

    def build(building: Path) -> str:
        write_random_init(source_folder, building)
        return f"{source}'s architecture and tokenizer, weights drawn anew (torch seed {INIT_SEED})\n"

    return built_once(target, f"the randomly initialised {source}", DONE_MARKER, build)


def write_random_init(source_folder: Path, out_dir: Path) -> None:
    """A freshly initialised model of ``source_folder``'s config, and its tokenizer, saved into ``out_dir``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from rlxf.models.saving import TOKENIZER_BYTES, save_model, weight_bytes

    config = AutoConfig.from_pretrained(source_folder)
    with torch.random.fork_rng(devices=[]):  # the caller's random state is not disturbed
        torch.manual_seed(INIT_SEED)
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(config, "dtype", None) or torch.float32)
    model.config.name_or_path = str(out_dir)
    what = f"a randomly initialised model of {source_folder}"
    check_free_space(out_dir.parent, weight_bytes(model) + 16 * TOKENIZER_BYTES, what)
    with cache_write(f"writing {what} to {out_dir}"):
        save_model(model, out_dir)
        AutoTokenizer.from_pretrained(source_folder).save_pretrained(out_dir)
