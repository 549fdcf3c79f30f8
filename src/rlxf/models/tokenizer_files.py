"""A saved policy's tokenizer files are the checkpoint's own: rlxf's padding choice (EOS as pad where
the tokenizer has none, left padding) is written beside them in ``rlxf_padding.json``, not into them."""

from __future__ import annotations

import copy
import json
from pathlib import Path

PADDING_FILE = "rlxf_padding.json"


def remember_original_padding(tokenizer) -> None:
    """Call before rlxf changes the tokenizer's padding (models/loading.py)."""
    tokenizer.rlxf_original_padding = {"pad_token": tokenizer.pad_token, "padding_side": tokenizer.padding_side}


def save_tokenizer(tokenizer, out_dir: str | Path) -> None:
    """``save_pretrained`` of the tokenizer as the checkpoint had it, plus rlxf's padding in a side file."""
    out_dir = Path(out_dir)
    original = getattr(tokenizer, "rlxf_original_padding", None)
    plain = tokenizer
    if original is not None:
        plain = copy.deepcopy(tokenizer)
        plain.pad_token = original["pad_token"]
        plain.padding_side = original["padding_side"]
    plain.save_pretrained(out_dir)
    padding = {"pad_token": tokenizer.pad_token, "pad_token_id": tokenizer.pad_token_id,
               "padding_side": tokenizer.padding_side}
    (out_dir / PADDING_FILE).write_text(json.dumps(padding, indent=1) + "\n")
