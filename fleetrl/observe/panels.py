"""The series a plot shows: how they are named, grouped into a panel, and read back.

A series is named "kind.key": a field of the kind's record in `fleetrl.observe.records`
(`series` checks that the field exists). A `Panel` is one subplot's series and style; the
report (`fleetrl.observe.report`) declares its panels and `fleetrl.observe.charts` draws
them. Both read a series from the run's records, grouped by kind, with `numeric`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any, Literal

from fleetrl.observe.records import Record

Records = dict[str, list[dict[str, Any]]]  # kind → its records, in step order


def series(record: type[Record], key: str) -> str:
    """The series name "kind.key" of a record's field. Raises `ValueError` if the record has
    no such field: a panel naming a key that nothing logs fails when its module loads."""
    if key not in {f.name for f in fields(record)}:
        raise ValueError(f"{record.__name__} has no field {key!r}: nothing logs it")
    return f"{record.kind}.{key}"


@dataclass(frozen=True)
class Panel:
    """One subplot: series named "kind.key", drawn as lines or stacked areas."""

    title: str
    series: tuple[str, ...]
    ylabel: str = ""
    # line (smoothed when long) | points (first series as dots, not smoothed: spikes such as
    # full snapshots matter; the others as reference lines beneath) | stack (the keys
    # stacked) | hist (one list key's entries as shares, stacked)
    style: Literal["line", "points", "stack", "hist"] = "line"
    log_bytes: bool = False  # y axis on a log scale, labelled in kB/MB/GB


def numeric(records: Records, name: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the "kind.key" series where the value is a finite number."""
    kind, key = name.split(".", 1)
    rows = [(r["step"], float(r[key])) for r in records.get(kind, []) if is_number(r.get(key))]
    return [step for step, _ in rows], [value for _, value in rows]


def is_number(value: Any) -> bool:
    """A finite int or float (bools, strings, lists, NaN and infinities are not plotted)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
