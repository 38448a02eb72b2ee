"""Append-only metrics log of a run: one JSON object per line in `runs/<name>/metrics.jsonl`.

Role: every process that measures something (trainer, eval) logs a typed record of
`fleetrl.observe.records` with `MetricsLogger.log_record(step, record)`, or a plain dict with
`MetricsLogger.log(kind, step, values)`; the report (`fleetrl.observe.report`) and any
notebook read the file back with `read_metrics`. The same logger hands each record to the
sinks it was given (TensorBoard, W&B: `fleetrl.observe.export`), so every dashboard shows
the figures of this file and no other.

Contract:
- One record per line: `{"kind": …, "step": …, "time": …, "wall": …, <values>}`.
  `kind` names the producer ("train", "sync", "eval": see `fleetrl.observe.records`);
  `step` is the producer's x-axis (trainer step, or policy version for "sync"); `time` is
  seconds since the run started on a monotonic clock; `wall` is unix time. Values are
  numbers, strings or lists of numbers or strings (numpy and torch scalars/arrays are converted).
- Each record is written with one unbuffered `write` of a whole line, so a crash loses at
  most the line being written, and readers never see half of an earlier record.
- Reopening an existing file appends: a partial last line left by a crash is cut off first,
  and `time` continues from the last record's time (time spent while no process was
  running is not counted, so `time` measures the run's working time).
- Not JSON-strict: NaN and infinities are written as `NaN`/`Infinity` (a NaN loss is worth
  seeing); Python's `json` reads them back.
- Sinks get the line as written (numpy/torch values already plain), reduced to its scalars
  (`scalars`: finite numbers; strings, lists and NaN stay in this file only), after the line
  is in the file. A sink that raises is dropped with one warning on stderr: this file is
  the record of truth, and a run does not stop for a dashboard.

Not covered: several processes writing one file (opening cuts a partial last line, which
could be another writer's line in flight: give each process its own file), network file
systems, rotation, and MLflow.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Protocol

from fleetrl.observe.records import Record

Value = float | int | str | list[float] | list[str]
RESERVED = ("kind", "step", "time", "wall")
_TAIL_BLOCK = 1 << 16  # bytes read backwards at a time when looking for the last line


class Sink(Protocol):
    """Where a record's scalars go besides the file (`fleetrl.observe.export`)."""

    def write(self, kind: str, step: int, wall: float, values: dict[str, float]) -> None:
        """Record `values` (field -> number) of a `kind` record at `step` (the kind's step
        axis), logged at unix time `wall`; each shows as `<kind>/<field>`."""

    def close(self) -> None:
        """Flush and release; called once, after the last `write`."""


class MetricsLogger:
    """Appends metric records to a `metrics.jsonl` file (see the module docstring).

    Usable as a context manager; `close()` releases the file and closes the sinks.
    Safe to call `log` from several threads of one process.
    """

    def __init__(self, path: Path, *, sinks: Sequence[Sink] = (), fsync: bool = False) -> None:
        """Open `path` for appending (created with its parents if missing).

        `sinks` receive each record's scalars after it is written (the logger closes them);
        `fsync=True` also forces each line to disk (survives a power loss, costs ~1 ms/line).
        """
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fsync = fsync
        self._lock = threading.Lock()
        self._offset = _resume_time(self.path)
        self._start = time.monotonic()
        # Unbuffered binary append: one write() per record keeps lines whole (see module).
        self._file = open(self.path, "ab", buffering=0)  # noqa: SIM115 (closed in close())
        self._sinks = list(sinks)

    def log(self, kind: str, step: int, values: dict[str, Value]) -> None:
        """Append one record of `kind` at `step`; `values` must not use the reserved keys."""
        clash = [key for key in values if key in RESERVED]
        if clash:
            raise ValueError(f"metric keys {clash} are reserved for the record header")
        now = self._offset + time.monotonic() - self._start
        wall = time.time()
        record = {"kind": kind, "step": int(step), "time": round(now, 6), "wall": wall, **values}
        line = json.dumps(record, default=_to_builtin) + "\n"
        with self._lock:
            self._file.write(line.encode())
            if self._fsync:
                os.fsync(self._file.fileno())
            if self._sinks:
                self._export(json.loads(line))  # decoded: numpy/torch values are plain now

    def log_record(self, step: int, record: Record) -> None:
        """Append `record` under its kind at `step`: the fields as keys, None ones left out
        (the line is what `log` writes for a dict of the fields that are set)."""
        values = {key: value for key, value in asdict(record).items() if value is not None}
        self.log(record.kind, step, values)

    def close(self) -> None:
        """Close the file and the sinks (idempotent)."""
        with self._lock:
            self._file.close()
            sinks, self._sinks = self._sinks, []
            for sink in sinks:
                try:
                    sink.close()
                except Exception as err:
                    _warn(sink, "closing", err)

    def _export(self, record: dict[str, Any]) -> None:
        values = scalars(record)
        for sink in list(self._sinks):
            try:
                sink.write(record["kind"], record["step"], record["wall"], values)
            except Exception as err:
                self._sinks.remove(sink)
                _warn(sink, "writing", err)

    def __enter__(self) -> MetricsLogger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """All records of a `metrics.jsonl` file, in file order.

    A last line that does not parse (the writer crashed, or is writing it right now) is
    skipped; a bad line anywhere else raises `ValueError` naming its line number, because
    that is corruption rather than a crash.
    """
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            if number == len(lines):  # no newline after it: an unfinished write
                break
            raise ValueError(f"{path}:{number}: not a JSON record: {err}") from err
    return records


def _resume_time(path: Path) -> float:
    """Cut a partial last line off `path` and return the last record's `time` (0 if none)."""
    if not path.exists():
        return 0.0
    with open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        tail = b""
        # Read backwards until the tail holds a complete line before the partial one.
        while end - len(tail) > 0 and tail.count(b"\n") < 2:
            size = min(_TAIL_BLOCK, end - len(tail))
            f.seek(end - len(tail) - size)
            tail = f.read(size) + tail
        cut = tail.rfind(b"\n") + 1
        if cut < len(tail):
            # Appending after a half-written line would merge it with the next record.
            f.truncate(end - len(tail) + cut)
        complete = tail[:cut].rstrip(b"\n").rsplit(b"\n", 1)[-1]
    try:
        return float(json.loads(complete).get("time", 0.0)) if complete else 0.0
    except (json.JSONDecodeError, AttributeError, TypeError, ValueError):
        return 0.0


def _to_builtin(value: Any) -> Any:
    """json.dumps fallback: numpy/torch scalars and arrays become Python numbers/lists."""
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"metric value of type {type(value).__name__} is not JSON-serialisable")


def scalars(record: dict[str, Any]) -> dict[str, float]:
    """A decoded record's finite numeric values, by key (the header left out): what the
    sinks show. Strings and lists (e.g. histograms of counts) have no scalar meaning, and a
    NaN or infinity is a gap in a chart, so both stay in the file only."""
    return {
        key: value
        for key, value in record.items()
        if key not in RESERVED
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    }


def _warn(sink: Sink, doing: str, err: Exception) -> None:
    print(
        f"fleetrl: metrics sink {type(sink).__name__} failed {doing} ({err}); "
        "it is dropped, metrics.jsonl goes on",
        file=sys.stderr,
    )
