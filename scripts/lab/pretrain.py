"""Pretraining on Python source code: the step before SFT that every open-weights model has had.

    the machine's .py files (standard library, installed packages; no tests, no fleetrl)
        ─▶ shuffled by a seed (the script keeps the last few for validation)
        ─▶ tokens, each file ended by <eos>, packed into rows of a fixed length
        ─▶ fleetrl.trainer.sft.train_sft with every token a target

A model trained only on demonstrations of twenty function templates learns their lines by
heart; read code first, it fits them far faster and generalises further
(docs/log/2026-12-04-s32-pretraining-on-code.md, "Pretraining on the machine's Python").
No hub is needed: the corpus is what this machine has installed. fleetrl's own sources are
never read, since they hold the task templates (the unseen ones of `heldout-templates` too).
`scripts/pretrain_code.py` is the command.
"""

from __future__ import annotations

import random
import sysconfig
from collections.abc import Callable, Iterable
from pathlib import Path

from fleetrl.types import Demo

MAX_FILE_CHARS = 200_000  # longer files are mostly generated tables, not code to learn from


def corpus_roots() -> list[Path]:
    """Where this interpreter's Python sources live: the standard library, installed packages."""
    paths = sysconfig.get_paths()
    return [Path(paths["stdlib"]), Path(paths["purelib"])]


def source_files(roots: Iterable[Path], seed: int) -> list[Path]:
    """Every .py file under `roots` but tests and fleetrl's own code, in an order shuffled
    by `seed` (the same files and seed give the same order)."""
    found = set()
    for root in roots:
        for path in root.rglob("*.py"):
            parts = [p.lower() for p in path.relative_to(root).parts]
            if any("fleetrl" in p or p.startswith("test") for p in parts):
                continue
            if path.is_file() and not path.is_symlink():
                found.add(path)
    ordered = sorted(found)
    random.Random(seed).shuffle(ordered)
    return ordered


def pack_rows(
    files: Iterable[Path], encode: Callable[[str], list[int]], eos: int, length: int, budget: int
) -> list[Demo]:
    """The files' tokens, each file followed by `eos`, cut into rows of exactly `length`
    tokens, every token a target, until `budget` tokens are taken. Files that are empty,
    not UTF-8 or longer than MAX_FILE_CHARS are passed over; the tail shorter than a row
    is dropped."""
    wanted = -(-budget // length)  # rows that hold `budget` tokens, the last one partly
    rows: list[Demo] = []
    buffer: list[int] = []
    for path in files:
        if len(rows) >= wanted:
            break
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if not text.strip() or len(text) > MAX_FILE_CHARS:
            continue
        buffer.extend(encode(text))
        buffer.append(eos)
        whole = min(len(buffer) // length, wanted - len(rows))
        for start in range(0, whole * length, length):
            chunk = buffer[start : start + length]
            row = Demo(task_id=str(path), plan="code", token_ids=chunk, loss_mask=[1] * length)
            rows.append(row)
        buffer = buffer[whole * length :]
    return rows
