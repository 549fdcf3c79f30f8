"""Input bounds: model outputs and uploads are untrusted, so every size the studio accepts is capped here."""

from __future__ import annotations

MAX_TEXT_CHARS = 20_000  # one prompt or one response
MAX_REASON_CHARS = 2_000  # a labeller's free-text reason
MAX_NAME_CHARS = 64  # labeller and campaign names
MAX_PAIRS_PER_CAMPAIGN = 20_000
MAX_BODY_BYTES = 8 * 1024 * 1024  # any request body (an imported JSONL of pairs is the largest)
MAX_SAMPLE_ROWS = 500  # rows of samples.jsonl in one answer
ISSUE_TTL_SECONDS = 600  # an issued pair nobody labelled goes back to the pool after this


class InputError(ValueError):
    """Bad input from a user or a file: one message that names the culprit."""


def bounded_text(value, what: str, limit: int = MAX_TEXT_CHARS) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} must be text, got {type(value).__name__}")
    if len(value) > limit:
        raise InputError(f"{what} has {len(value)} characters; the limit is {limit}")
    return value


def name(value, what: str) -> str:
    """A labeller or campaign name: 1..64 printable characters, no surrounding space."""
    text = bounded_text(value, what, MAX_NAME_CHARS).strip()
    if not text or not text.isprintable():
        raise InputError(f"{what} must be 1-{MAX_NAME_CHARS} printable characters")
    return text
