"""A micro task's gold patch read as the one change it makes to the buggy module.

Micro patches are one hunk in one file: a single line changed, or a line inserted. The
expert edits by it and renamed copies rebuild the correct module from it.
Not covered: patches of several files or hunks (they raise ValueError).
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class GoldChange:
    """The gold patch as one change to the buggy file: lines[start:end] become `new`."""

    path: str  # workspace-relative path of the module
    start: int  # 0-based index of the first buggy line replaced (insertion point if none)
    end: int  # index after the last buggy line replaced (== start for an insertion)
    old: tuple[str, ...]  # the buggy lines replaced, as the patch shows them
    new: tuple[str, ...]  # the lines that take their place


def gold_change(patch: str) -> GoldChange:
    """Parse a one-file, one-hunk unified diff into the change it makes."""
    path = ""
    hunk_start: int | None = None
    body: list[str] = []
    for line in patch.splitlines():
        if line.startswith("+++ "):
            path = line[4:].removeprefix("b/")
        elif line.startswith("@@"):
            if hunk_start is not None:
                raise ValueError("gold patch has more than one hunk")
            hunk_start = int(re.match(r"@@ -(\d+)", line).group(1)) - 1  # type: ignore[union-attr]
        elif hunk_start is not None and line[:1] in (" ", "-", "+"):
            body.append(line)
    if not path or hunk_start is None:
        raise ValueError("not a unified diff with a hunk")
    changed = [i for i, line in enumerate(body) if line[0] != " "]
    first, last = changed[0], changed[-1]
    start = hunk_start + sum(1 for line in body[:first] if line[0] != "+")
    span = body[first : last + 1]  # context lines inside the span belong to both sides
    old = tuple(line[1:] for line in span if line[0] != "+")
    new = tuple(line[1:] for line in span if line[0] != "-")
    return GoldChange(path, start, start + len(old), old, new)
