"""A client's per-sample fields, checked so that a missing or malformed one is the client's 400, not a 500.

Two ways, both general (no reward is special-cased):

* a reward may declare the metadata fields it needs: ``metadata_fields = {"answer": int}`` maps each field to
  a parser the server calls on every sample's value before scoring; a field that is missing, or whose parser
  raises (``int("two")``, ``int(None)``), is refused naming the field and the sample's index;
* for every reward: the rows the reward gets are :class:`SampleRow` dicts, whose ``row[key]`` on a missing key
  raises :class:`MissingField` (a ``KeyError`` that knows the sample's index), so a reward reading a field
  the client did not send is also a 400 — while any other failure of the reward stays a 500.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence


class MissingField(KeyError):
    """``metadata[index]`` lacks ``key``, which the reward read."""

    def __init__(self, index: int, key: object) -> None:
        super().__init__(index, key)
        self.index, self.key = index, key

    def __str__(self) -> str:
        return f"sample {self.index}: metadata has no field {self.key!r}"


class SampleRow(dict):
    """One sample's metadata; a missing ``row[key]`` names the sample (``dict.__missing__``)."""

    def __init__(self, index: int, row: Mapping) -> None:
        super().__init__(row)
        self.index = index

    def __missing__(self, key):
        raise MissingField(self.index, key)


def sample_rows(metadata: Sequence[Mapping]) -> list[SampleRow]:
    return [SampleRow(i, row) for i, row in enumerate(metadata)]


def field_problem(reward: object, metadata: Sequence[Mapping]) -> str | None:
    """The first declared field (``reward.metadata_fields``) that a sample lacks or that does not parse."""
    fields: Mapping[str, Callable] = getattr(reward, "metadata_fields", None) or {}
    for index, row in enumerate(metadata):
        for key, parse in fields.items():
            if key not in row:
                return f"sample {index}: metadata has no field {key!r}"
            try:
                parse(row[key])
            except (TypeError, ValueError) as err:
                return f"sample {index}: metadata field {key!r} is malformed ({row[key]!r:.80}: {err})"
    return None
