"""Which attention window a transformers config applies (Mistral-style sliding windows)."""

from __future__ import annotations


def sliding_window(config) -> int | None:
    """The attention window the config applies, or None (full attention)."""
    window = getattr(config, "sliding_window", None)
    if window is None:
        return None
    layer_types = getattr(config, "layer_types", None)
    if layer_types is not None and all(t == "full_attention" for t in layer_types):
        return None
    if config.model_type == "qwen2" and not getattr(config, "use_sliding_window", False):
        return None
    return int(window)


def mixes_windows(config) -> bool:
    """Some layers attend through a sliding window and others attend to everything (``layer_types``)."""
    layer_types = getattr(config, "layer_types", None)
    return sliding_window(config) is not None and layer_types is not None and len(set(layer_types)) > 1
