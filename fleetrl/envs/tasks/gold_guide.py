"""The gold-patch guide: a scripted episode for any task that has a gold patch.

    gold patch ─▶ its hunks, checked against the base files (read from `task.repo`)
       FIX:     read_file of each file the patch changes (around the changes when long)
       FIX, RECOVER: edit_file per hunk: its changed lines, widened by neighbouring lines
                until `old` is unique in the file as the earlier edits left it
                (write_file for a file the patch creates)
              ─▶ run: import the changed modules ─▶ finish

This is the guide of a folder made by `fleetrl tasks make` (and of any task outside the
bundled suites, `fleetrl.envs.tasks.suites.guide_for`). Its tool calls are the harness's
own (`fleetrl.envs.harness.tools`), so a model learns from them what it can send. The
check imports the changed modules rather than running tests: the hidden tests are not in
the workspace, and a careful engineer without them checks at least that the code still
imports. A step whose result is not what the fix expects (a read or an edit refused, an
import that fails, a reply over the token budget) is a problem: the guide finishes, and
the episode is no guide.

Contract: the replies are a function of the task and the context only (the turn count and
the tool results), as a model's would be; one instance serves many episodes at once, one
per task, and tells them apart by the problem statement in the first user turn.
Not covered: patches that delete, rename or copy files, binary patches, files without a
newline at their end where a hunk reaches it; multi-line `old` beyond the reply budget.
"""

from __future__ import annotations

import keyword
import random
import re
from dataclasses import dataclass
from pathlib import Path

from fleetrl.envs.tasks import guide
from fleetrl.envs.tasks.guide import edit_windows, scripted_completion
from fleetrl.model.chat import (
    GENERATION_PROMPT,
    IM_END,
    USER_TURN,
    Message,
    ToolCall,
    format_reply,
    tool_results,
)
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, SamplingParams, Task

READ_WHOLE = 30  # a file of more lines is read around its changes, not whole
AROUND = 8  # lines read above the first change and below the last
_HUNK = re.compile(r"@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_REFUSED = ("rename from", "copy from", "deleted file mode", "Binary files", "GIT binary patch")


@dataclass(frozen=True)
class Hunk:
    """One hunk as a change to the file before it: lines[start:start+len(old)] become new."""

    start: int  # 0-based index of the first line replaced (the insertion point if none)
    old: tuple[str, ...]  # the lines replaced, changed ones only (no outer context)
    new: tuple[str, ...]  # the lines that take their place


@dataclass(frozen=True)
class FilePatch:
    """What a patch does to one file."""

    path: str  # workspace-relative
    created: bool  # the patch creates the file (its one hunk holds the whole text)
    hunks: tuple[Hunk, ...]  # in file order


def parse_patch(patch: str) -> list[FilePatch]:
    """The files of a unified diff (git's format) and their hunks; ValueError for what the
    guide cannot apply with its tools (see the module's Not covered)."""
    files: list[FilePatch] = []
    path, created, hunks = "", False, []
    lines = patch.split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if line.startswith("diff --git "):
            if path:
                files.append(FilePatch(path, created, tuple(hunks)))
            path, created, hunks = "", False, []
        elif line.startswith(_REFUSED):
            raise ValueError(f"the gold patch has a change the guide cannot make: {line!r}")
        elif line.startswith("--- "):
            created = line == "--- /dev/null"
        elif line.startswith("+++ "):
            if line == "+++ /dev/null":
                raise ValueError("the gold patch deletes a file")
            if path:  # a plain diff without `diff --git` headers between files
                files.append(FilePatch(path, created, tuple(hunks)))
                hunks = []
            path = line[4:].split("\t")[0].removeprefix("b/")
        elif match := _HUNK.match(line):
            if not path:
                raise ValueError("a hunk before its file's header")
            hunk, i = _hunk(match, lines, i)
            hunks.append(hunk)
    if path:
        files.append(FilePatch(path, created, tuple(hunks)))
    if not files or not all(f.hunks for f in files):
        raise ValueError("not a unified diff with a hunk per file")
    return files


def _hunk(match: re.Match[str], lines: list[str], i: int) -> tuple[Hunk, int]:
    """The hunk whose header is `match`, its body from lines[i]; and the line after it."""
    old_start, old_count = int(match[1]), int(match[2] or 1)
    new_count = int(match[4] or 1)
    body = []
    while old_count > 0 or new_count > 0:
        if i >= len(lines):
            raise ValueError("a hunk ends before its line counts")
        line = lines[i] or " "  # a context line whose space an editor stripped
        i += 1
        if line.startswith("\\"):
            raise ValueError("a hunk reaches a file end without a newline")
        if line[0] not in " -+":
            raise ValueError(f"not a hunk line: {line!r}")
        body.append(line)
        old_count -= line[0] != "+"
        new_count -= line[0] != "-"
    if i < len(lines) and lines[i].startswith("\\"):
        raise ValueError("a hunk reaches a file end without a newline")
    changed = [n for n, line in enumerate(body) if line[0] != " "]
    if not changed:
        raise ValueError("a hunk that changes nothing")
    first, last = changed[0], changed[-1]
    # "-3,0": an insertion after line 3; "-3,2": lines 3 and 4 (1-based)
    start = old_start - (1 if match[2] != "0" else 0)
    start += sum(1 for line in body[:first] if line[0] != "+")
    span = body[first : last + 1]  # context lines inside the span belong to both sides
    old = tuple(line[1:] for line in span if line[0] != "+")
    new = tuple(line[1:] for line in span if line[0] != "-")
    return Hunk(start, old, new), i


def unique_edit(lines: list[str], hunk: Hunk) -> tuple[str, str]:
    """`old` and `new` for edit_file making `hunk` in the file of `lines`: the changed
    lines, indentation of the first cut off, widened by neighbouring lines until `old`
    occurs exactly once. ValueError when the file does not hold the hunk's lines or no
    window of it is unique."""
    end = hunk.start + len(hunk.old)
    if tuple(lines[hunk.start : end]) != hunk.old:
        raise ValueError(f"the file does not hold the lines of a hunk at line {hunk.start + 1}")
    text = "\n".join(lines)
    for a, b in edit_windows(hunk.start, end, len(lines)):
        old = "\n".join(lines[a:b])
        new = "\n".join([*lines[a : hunk.start], *hunk.new, *lines[end:b]])
        indent = old[: len(old) - len(old.lstrip())]
        if new.startswith(indent):  # shorter to send, and `old` still anchors the edit
            old, new = old[len(indent) :], new[len(indent) :]
        if old and text.count(old) == 1:
            return old, new
    raise ValueError(f"no unique text around the change at line {hunk.start + 1}")


def check_command(paths: list[str]) -> str | None:
    """A shell command importing the Python modules at `paths`, or None where none is a
    module (`src/` layouts import from `src`)."""
    modules, src = [], False
    for path in paths:
        if not path.endswith(".py"):
            continue
        parts = path.removesuffix(".py").split("/")
        if parts[0] == "src" and len(parts) > 1:
            src, parts = True, parts[1:]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(p.isidentifier() and not keyword.iskeyword(p) for p in parts):
            modules.append(".".join(parts))
    if not modules:
        return None
    # -B: no bytecode left in the workspace (the verifier refuses compiled files)
    command = f'python -B -c "import {", ".join(dict.fromkeys(modules))}"'
    return f"PYTHONPATH=src {command}" if src else command


def _read_call(path: str, lines: list[str], hunks: tuple[Hunk, ...]) -> ToolCall:
    """read_file of the whole file when short, else of the lines around its changes."""
    n = len(lines) - (lines[-1] == "")  # read_file numbers lines, not the final newline
    if n <= READ_WHOLE:
        return ToolCall("read_file", {"path": path})
    first = hunks[0].start
    last = max(h.start + max(len(h.old), 1) for h in hunks)
    start, end = max(1, first + 1 - AROUND), min(n, last + AROUND)
    return ToolCall("read_file", {"path": path, "start": start, "end": end})


def script(task: Task, plan: str) -> list[tuple[str, ToolCall]]:
    """(step, call) of each reply of `plan` (FIX or RECOVER) on `task`, reading the base
    files from its repository. ValueError where the guide cannot fix the task."""
    if plan not in (guide.FIX, guide.RECOVER):
        raise ValueError(f"the gold-patch guide has no plan {plan!r}")
    if not task.patch.strip():
        raise ValueError(f"{task.instance_id} has no gold patch")
    files = parse_patch(task.patch)
    reads, edits = [], []
    for file in files:
        if file.created:
            content = "\n".join(file.hunks[0].new) + "\n"
            call = ToolCall("write_file", {"path": file.path, "content": content})
            edits.append(("write", call))
            continue
        try:
            text = (Path(task.repo) / file.path).read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise ValueError(f"{task.instance_id}: cannot read {file.path}: {err}") from None
        lines = text.split("\n")
        reads.append(("read", _read_call(file.path, lines, file.hunks)))
        offset = 0
        for hunk in file.hunks:
            at = Hunk(hunk.start + offset, hunk.old, hunk.new)
            old, new = unique_edit(lines, at)
            call = ToolCall("edit_file", {"path": file.path, "old": old, "new": new})
            edits.append(("edit", call))
            lines[at.start : at.start + len(at.old)] = at.new
            offset += len(at.new) - len(at.old)
    command = check_command([file.path for file in files])
    checks = [("check", ToolCall("run", {"command": command}))] if command else []
    steps = [*(reads if plan == guide.FIX else []), *edits, *checks]
    return [*steps, ("finish", ToolCall("finish", {}))]


def _problem(step: str, result: str) -> str | None:
    """What went wrong with `step`, given the tool result it got; None when nothing did."""
    if step == "read":
        ok = not result.startswith("error")
    elif step == "edit":
        ok = result.startswith("edited ")
    elif step == "write":
        ok = result.startswith("wrote ")
    elif step == "check":
        ok = result.split("\n", 1)[0] == "exit code: 0"
    else:
        return None
    return None if ok else f"{step} got {result[:200]!r}"


class GoldScript:
    """A TokenPolicy sending the gold-patch guide's replies for one plan on its tasks."""

    def __init__(self, tasks: list[Task], plan: str, tokenizer: Tokenizer, after: int = 0) -> None:
        """`after`: replies another policy sent before this one takes over. ValueError
        where the guide cannot fix a task, or two tasks share a problem statement."""
        self.tokenizer = tokenizer
        self.after = after
        self.problems: dict[str, list[str]] = {task.instance_id: [] for task in tasks}
        self.unlearned: dict[str, list[list[int]]] = {task.instance_id: [] for task in tasks}
        self._scripts = {task.instance_id: script(task, plan) for task in tasks}
        self._ids: dict[str, str] = {}
        for task in tasks:
            other = self._ids.setdefault(task.problem_statement, task.instance_id)
            if other != task.instance_id:
                raise ValueError(f"{task.instance_id} and {other} have the same problem statement")

    def _task_id(self, context: str) -> str:
        """The task whose problem statement is in the context's first user turn (the
        longest one there, since the harness's `task_template` may wrap it)."""
        match = USER_TURN.search(context)
        found = [s for s in self._ids if match and s in match[1]]
        if not found:
            shown = (match[1] if match else context)[:80]
            raise LookupError(f"the prompt states no problem of the guide's tasks: {shown!r}")
        return self._ids[max(found, key=len)]

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """The next reply's ids: the script's next call, or `finish` after a problem."""
        context = self.tokenizer.decode(prompt_ids)
        task_id = self._task_id(context)
        steps, problems = self._scripts[task_id], self.problems[task_id]
        turns = context.split(GENERATION_PROMPT)[1:]  # the last one: this turn, still empty
        turn = len(turns) - 1 - self.after
        if 1 <= turn <= len(steps) and not problems:
            results = tool_results(turns[-2])
            if problem := _problem(steps[turn - 1][0], results[-1] if results else ""):
                problems.append(problem)
        done = problems or not 0 <= turn < len(steps)
        call = ToolCall("finish", {}) if done else steps[turn][1]
        ids = self.tokenizer.encode(format_reply(Message("assistant", "", [call])) + IM_END)
        return scripted_completion(prompt_ids, ids, params, self.tokenizer.eos_id, problems)


class GoldPatchGuide:
    """The Guide protocol's provider for any task with a gold patch: FIX and RECOVER."""

    sources = (Path(__file__), Path(guide.__file__))

    def steps(self, task: Task, plan: str) -> tuple[str, ...]:
        """The steps of `plan` on `task` (they depend on its patch)."""
        return tuple(step for step, _ in script(task, plan))

    def policy(
        self, tasks: list[Task], plan: str, tokenizer: Tokenizer, after: int = 0
    ) -> GoldScript:
        """A GoldScript over `tasks` by `plan`."""
        return GoldScript(tasks, plan, tokenizer, after)

    def copy(self, task: Task, repo: Path, rng: random.Random, dest: Path) -> guide.TaskCopy:
        """ValueError: it makes none (renaming needs to know what a task's names mean)."""
        raise ValueError("the gold-patch guide makes no copies of a task")


GOLD_PATCH_GUIDE = GoldPatchGuide()
