"""``rlxf config show``: the resolved config tree with each key's value, default and description.

The output is YAML (it loads back to the same tree, so it can start a recipe); each line's comment holds
the key's default (``*`` marks a value that differs from it) and its description, taken from the pydantic
field descriptions in the config sections. The defaults are those of the code, not of the recipe; the
``algorithm`` section's defaults are those of the chosen preset (``algorithm.name``).
"""

from __future__ import annotations

import typing
from typing import Any

import yaml
from pydantic import BaseModel

from rlxf.algos.config import AlgorithmConfig
from rlxf.config import Config

COMMENT_COLUMN = 42


def _flow(value: Any) -> str:
    """One-line YAML of a leaf value (lists and dicts in flow style)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10**9, sort_keys=False).strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


def _defaults_of(section: BaseModel, parent_default: Any) -> BaseModel | None:
    """The section as the code would build it with no recipe (the parent's default when it has one, as
    ``critic_optim``'s own learning rate); for ``algorithm``, the chosen preset's values."""
    if isinstance(section, AlgorithmConfig):
        return AlgorithmConfig(name=section.name)
    if isinstance(parent_default, type(section)):
        return parent_default
    try:
        return type(section)()
    except ValueError:  # a section without defaults for every field
        return None


def _lines(section: BaseModel, defaults: BaseModel | None, indent: str) -> list[str]:
    out = []
    for name, field in type(section).model_fields.items():
        value = getattr(section, name)
        default = getattr(defaults, name, None) if defaults is not None else None
        description = " ".join((field.description or "").split())
        if isinstance(value, BaseModel):
            sub_defaults = _defaults_of(value, default)
            header = f"{indent}{name}:"
            out.append(f"{header.ljust(COMMENT_COLUMN)}  # {description}" if description else header)
            out += _lines(value, sub_defaults, indent + "  ")
            continue
        dumped = value.model_dump(mode="json") if isinstance(value, BaseModel) else _jsonable(value)
        shown = _flow(dumped)
        was = _flow(_jsonable(default)) if defaults is not None else "?"
        mark = "* " if defaults is not None and shown != was else ""
        text = f"{indent}{name}: {shown}"
        out.append(f"{text.ljust(COMMENT_COLUMN)}  # {mark}default {was}" + (f" | {description}" if description else ""))
    return out


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, tuple):
        return list(value)
    return value


def describe_config(config: Config, title: str = "") -> str:
    """The annotated YAML of ``config`` (see the module docstring)."""
    head = [f"# {title}"] if title else []
    head.append("# key: value   # default (* = changed) | what it means")
    return "\n".join([*head, *_lines(config, Config(), "")]) + "\n"


def config_key_exists(dotted: str) -> bool:
    """Whether ``dotted`` names a key of the config tree; anything below a free-form mapping (``kwargs``,
    ``task_args``, ...) counts as existing."""
    model: Any = Config
    for part in dotted.split("."):
        fields = getattr(model, "model_fields", None)
        if model is FREE_FORM:
            return True
        if fields is None or part not in fields:
            return False
        annotation = fields[part].annotation
        model = _section_type(annotation) or (FREE_FORM if _is_mapping(annotation) else None)
    return True


FREE_FORM = object()  # below a dict-typed field: any key


def _section_type(annotation: Any) -> Any:
    """The BaseModel class of a field's annotation (``X | None`` -> X), or None for a leaf."""
    for candidate in (annotation, *getattr(annotation, "__args__", ())):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def _is_mapping(annotation: Any) -> bool:
    return any(typing.get_origin(a) is dict or a is dict for a in (annotation, *typing.get_args(annotation)))
