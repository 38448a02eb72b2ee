"""The micro task the verifier's end-to-end tests grade, and edits of its module."""

from pathlib import Path

TASK_ID = "micro-train-0007"  # nkims(j): Horner-style fold; bug: initial value 1 instead of 0


def module_path(workspace: Path) -> Path:
    return workspace / "nkims.py"


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)
