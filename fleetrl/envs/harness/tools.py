"""The agent's tools: what each one does in a sandbox, and the specs the model is shown.

Tools: `read_file(path, start, end)` (numbered lines), `write_file(path, content)`,
`edit_file(path, old, new)` (exact, unique match; a refusal shows the file's lines closest to
`old`, as aider does, so a mis-copied line can be fixed by copying again), `grep(pattern,
path)`, `list_dir(path)`, `run(command, timeout)` (a shell command) and `finish(message)`.

Contract: `execute` never raises. Whatever the model wrote (unknown tool, missing or
mistyped argument, a path outside the workspace, a failing command), the outcome is a text
for the model, marked as an error when the call was at fault, so the harness can count it.
Paths are relative to the workspace root; an absolute path under the sandbox's workdir
(e.g. `/workspace/a.py`) means the same file.
"""

from __future__ import annotations

import difflib
import posixpath
from dataclasses import dataclass
from typing import Any

from fleetrl.config import HarnessSection
from fleetrl.envs.sandbox import Sandbox
from fleetrl.model.chat import ToolCall

_STRING = {"type": "string"}
_INTEGER = {"type": "integer"}


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict:
    parameters = {"type": "object", "properties": properties, "required": required}
    return {"name": name, "description": description, "parameters": parameters}


TOOL_SPECS: list[dict[str, Any]] = [
    _spec(
        "read_file",
        "Show a file with line numbers, optionally only lines start..end (1-based).",
        {"path": _STRING, "start": _INTEGER, "end": _INTEGER},
        ["path"],
    ),
    _spec(
        "write_file",
        "Create or overwrite a file.",
        {"path": _STRING, "content": _STRING},
        ["path", "content"],
    ),
    _spec(
        "edit_file",
        "Replace the one exact occurrence of `old` in a file by `new`.",
        {"path": _STRING, "old": _STRING, "new": _STRING},
        ["path", "old", "new"],
    ),
    _spec(
        "grep",
        "Search files for a regular expression.",
        {"pattern": _STRING, "path": _STRING},
        ["pattern"],
    ),
    _spec("list_dir", "List a directory.", {"path": _STRING}, []),
    _spec(
        "run",
        "Run a shell command in the repository (e.g. the tests) and show its output.",
        {"command": _STRING, "timeout": _INTEGER},
        ["command"],
    ),
    _spec("finish", "Stop: the task is done.", {"message": _STRING}, []),
]
TOOL_NAMES = [spec["name"] for spec in TOOL_SPECS]


@dataclass
class ToolOutcome:
    """What a call produced, for the model and for the episode's counters."""

    text: str  # shown to the model inside <tool_response>
    error: bool  # the call itself was at fault (bad name, arguments, path, missing match)
    finished: bool = False  # `finish` was called


class ToolError(Exception):
    """A call the model got wrong; its message is shown to the model."""


def truncate(text: str, max_chars: int) -> str:
    """Keep the head and tail of a long text, saying how much was cut."""
    if len(text) <= max_chars:
        return text
    half = max_chars // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters cut ...]\n{text[-half:]}"


def execute(sandbox: Sandbox, call: ToolCall, limits: HarnessSection) -> ToolOutcome:
    """Run one tool call in the sandbox within the harness's tool limits; never raises."""
    handler = _HANDLERS.get(call.name)
    if handler is None:
        known = ", ".join(TOOL_NAMES)
        return ToolOutcome(f"error: unknown tool {call.name!r}; tools are {known}", error=True)
    try:
        outcome = handler(sandbox, _Args(call), limits)
    except ToolError as err:
        return ToolOutcome(f"error: {err}", error=True)
    except Exception as err:  # a sandbox failure must not end the episode
        return ToolOutcome(f"error: {call.name} failed: {type(err).__name__}: {err}", error=True)
    outcome.text = truncate(outcome.text, limits.max_output_chars)
    return outcome


class _Args:
    """Typed access to a call's arguments, with errors phrased for the model."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        spec = next(s for s in TOOL_SPECS if s["name"] == call.name)
        unknown = set(call.arguments) - set(spec["parameters"]["properties"])
        if unknown:
            raise ToolError(f"{call.name} has no argument(s) {', '.join(sorted(unknown))}")

    def text(self, name: str, default: str | None = None) -> str:
        value = self.call.arguments.get(name, default)
        if value is None:
            raise ToolError(f"{self.call.name} needs the argument {name!r}")
        if not isinstance(value, str):
            raise ToolError(f"{self.call.name}: {name!r} must be a string")
        return value

    def integer(self, name: str) -> int | None:
        value = self.call.arguments.get(name)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            raise ToolError(f"{self.call.name}: {name!r} must be an integer")
        return value


def _path(sandbox: Sandbox, raw: str) -> str:
    """Workspace-relative, normalised path; refuses to leave the workspace."""
    path = raw.strip()
    root = sandbox.workdir.rstrip("/") + "/"
    if path.startswith(root):
        path = path[len(root) :]
    elif path == sandbox.workdir:
        path = "."
    path = posixpath.normpath(path or ".")
    if path.startswith("/") or path == ".." or path.startswith("../"):
        raise ToolError(f"path {raw!r} is outside the workspace")
    return path


def _read_text(sandbox: Sandbox, path: str, limits: HarnessSection) -> str:
    try:
        data = sandbox.read_file(path, max_bytes=limits.max_file_bytes + 1)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as err:
        raise ToolError(f"cannot read {path!r}: {type(err).__name__}") from None
    if len(data) > limits.max_file_bytes:
        raise ToolError(f"{path!r} is larger than {limits.max_file_bytes} bytes")
    return data.decode("utf-8", errors="replace")


def _read_file(sandbox: Sandbox, args: _Args, limits: HarnessSection) -> ToolOutcome:
    path = _path(sandbox, args.text("path"))
    lines = _read_text(sandbox, path, limits).splitlines()
    start, end = args.integer("start") or 1, args.integer("end") or len(lines)
    if start < 1 or end < start:
        raise ToolError(f"read_file: need 1 <= start <= end, got start={start} end={end}")
    numbered = [f"{n}: {lines[n - 1]}" for n in range(start, min(end, len(lines)) + 1)]
    return ToolOutcome("\n".join(numbered) if numbered else "(empty)", error=False)


def _write_file(sandbox: Sandbox, args: _Args, limits: HarnessSection) -> ToolOutcome:
    path = _path(sandbox, args.text("path"))
    content = args.text("content")
    sandbox.write_file(path, content)
    return ToolOutcome(f"wrote {len(content)} characters to {path}", error=False)


def _edit_file(sandbox: Sandbox, args: _Args, limits: HarnessSection) -> ToolOutcome:
    path = _path(sandbox, args.text("path"))
    old, new = args.text("old"), args.text("new")
    if not old:
        raise ToolError("edit_file: 'old' must not be empty")
    text = _read_text(sandbox, path, limits)
    count = text.count(old)
    if count > 1:
        raise ToolError(
            f"edit_file: 'old' text found {count} times in {path}; include more context"
        )
    if count == 0:
        closest = closest_lines(text, old)
        shown = f"; the closest lines in the file:\n{closest}" if closest else ""
        raise ToolError(f"edit_file: 'old' text not found in {path}{shown}")
    sandbox.write_file(path, text.replace(old, new, 1))
    return ToolOutcome(f"edited {path}", error=False)


def closest_lines(text: str, old: str, cutoff: float = 0.6) -> str:
    """The lines of `text` that `old` most likely meant, numbered as read_file shows them:
    as many as `old` has, from the line most like its first one; "" if no line is at least
    `cutoff` alike (difflib's ratio, indentation ignored)."""
    lines = text.splitlines()
    wanted = old.splitlines() or [old]
    matcher = difflib.SequenceMatcher(b=wanted[0].strip())
    best, best_ratio = -1, -1.0  # the first line of the highest ratio wins

    def beats(ratio: float) -> bool:
        return ratio >= cutoff and ratio > best_ratio

    for i, line in enumerate(lines):
        matcher.set_seq1(line.strip())
        # the cheap upper bounds first, as difflib.get_close_matches does
        if beats(matcher.real_quick_ratio()) and beats(matcher.quick_ratio()):
            ratio = matcher.ratio()
            if beats(ratio):
                best, best_ratio = i, ratio
    if best < 0:
        return ""
    return "\n".join(
        f"{n + 1}: {lines[n]}" for n in range(best, min(best + len(wanted), len(lines)))
    )


def _grep(sandbox: Sandbox, args: _Args, limits: HarnessSection) -> ToolOutcome:
    pattern = args.text("pattern")
    path = _path(sandbox, args.text("path", "."))
    result = sandbox.exec(["grep", "-rnIE", "--exclude-dir=.git", "-e", pattern, "--", path])
    if result.exit_code == 1:
        return ToolOutcome("no matches", error=False)
    if result.exit_code != 0:
        raise ToolError(f"grep: {result.stderr.strip() or 'failed'}")
    return ToolOutcome(result.stdout.rstrip("\n"), error=False)


def _list_dir(sandbox: Sandbox, args: _Args, limits: HarnessSection) -> ToolOutcome:
    path = _path(sandbox, args.text("path", "."))
    try:
        entries = sandbox.list_dir(path)
    except (FileNotFoundError, NotADirectoryError) as err:
        raise ToolError(f"cannot list {path!r}: {type(err).__name__}") from None
    return ToolOutcome("\n".join(entries) if entries else "(empty)", error=False)


def _run(sandbox: Sandbox, args: _Args, limits: HarnessSection) -> ToolOutcome:
    command = args.text("command")
    timeout = args.integer("timeout") or limits.run_timeout_s
    result = sandbox.exec(command, timeout=min(float(timeout), limits.run_timeout_s))
    parts = [f"exit code: {result.exit_code}" + (" (timed out)" if result.timed_out else "")]
    if result.stdout:
        parts.append(result.stdout.rstrip("\n"))
    if result.stderr:
        parts.append("stderr:\n" + result.stderr.rstrip("\n"))
    # A failing command is information for the model, not a malformed call.
    return ToolOutcome("\n".join(parts), error=False)


def _finish(sandbox: Sandbox, args: _Args, limits: HarnessSection) -> ToolOutcome:
    args.text("message", "")
    return ToolOutcome("finished", error=False, finished=True)


_HANDLERS = {
    "read_file": _read_file,
    "write_file": _write_file,
    "edit_file": _edit_file,
    "grep": _grep,
    "list_dir": _list_dir,
    "run": _run,
    "finish": _finish,
}
