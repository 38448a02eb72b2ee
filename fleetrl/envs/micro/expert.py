"""The scripted expert: a token policy that fixes micro tasks the way a model would.

    prompt ids ─▶ decode ─▶ user turn = a task's problem statement ─▶ which task
               ─▶ count of earlier turns + tool results read from the context
               ─▶ the plan's next tool call ─▶ reply ids (format_reply + <|im_end|>)

The expert decides every reply from its context, like a model: it decodes the prompt ids,
finds its task by the problem statement in the user turn, counts its earlier turns and
reads the tool results. Only the fix itself comes from outside, from the gold patch. A plan
(PLANS) fixes the order of its tool calls: `read_file` of the module, `edit_file(path,
old, new)` with the shortest unique `old` (the changed line without its indentation,
widened by neighbouring lines until the file holds it exactly once), `run` of the call
from the problem statement (the hidden tests are not in the workspace), `finish`. Plans
vary the order a little (look at the folder first, reproduce the bug before fixing it),
which gives a model more than one path to learn.

One expert serves many episodes at once, one per task of its list (their statements must
differ, or it could not tell them apart). `problems[instance_id]` lists everything that
went differently than a correct fix would go (an edit refused, a wrong value printed); an
episode with problems is no demonstration.

One plan shows a recovery: `slip` first sends an edit whose `old` mis-copies the line (a
number, quoted letter or name off by one character, the way a small model mis-copies what
it read), gets it refused with the file's closest lines, then sends the correct edit. The
slipped reply is listed in `unlearned` so that training masks it: a model should learn the
retry, not the slip.

Another shows a recovery from a wrong fix: `retry` first changes the buggy line the wrong way
(`wrong_fix`: another syntax-tree mutation of that line, or one of its names swapped), runs
the example and sees it still print a wrong value, then edits its own wrong line into the
fix. The wrong edit is unlearned as the slip is; the run that exposes it, and the second
edit, are learned.

An expert can also take over another policy's episode `after` replies in: `RECOVER` then
sends the correct edit, computed from the file as the episode last read it, checks and
finishes. A guided group uses it to continue a sample whose edit was refused
(`fleetrl.rollout.guidance`).

Not covered: patches touching more than one file or hunk (micro patches are one
single-line change or insertion); a wrong fix of an insertion; prompts whose user turn is
not the bare problem statement (a harness `task_template` that wraps it).
"""

from __future__ import annotations

import keyword
import random
import re
import string
from dataclasses import dataclass, replace
from pathlib import Path

from fleetrl.envs import pyast
from fleetrl.envs.micro.gold import GoldChange, gold_change
from fleetrl.envs.micro.statement import parse_statement
from fleetrl.envs.tasks.guide import edit_windows, scripted_completion
from fleetrl.envs.tasks.mutations import find_mutations
from fleetrl.model.chat import (
    GENERATION_PROMPT,
    IM_END,
    USER_TURN,
    Message,
    ToolCall,
    format_reply,
    parse_reply,
    tool_results,
)
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, SamplingParams, Task

PLANS: dict[str, tuple[str, ...]] = {
    "fix": ("read", "edit", "check", "finish"),
    "look_first": ("list", "read", "edit", "check", "finish"),
    "reproduce": ("read", "check", "edit", "check", "finish"),
    "slip": ("read", "slip", "edit", "check", "finish"),
    "retry": ("read", "wrong", "check", "edit", "check", "finish"),
}
UNLEARNED_STEPS = ("slip", "wrong")  # replies a model should not learn to send
RECOVER = ("edit", "check", "finish")  # after another policy's turns that read the file
REFUSED = "error: edit_file: 'old' text not found"  # how a refused edit's result begins
_NAME = re.compile(r"\b[a-z_]\w*\b")  # a Python name, as `wrong_fix` swaps them


@dataclass(frozen=True)
class Example:
    """The call in a micro problem statement and what it should print once fixed."""

    module: str  # module to import the function from
    function: str
    call: str  # e.g. "nkims([4, 8])"
    expected: str  # what `print(call)` shows after the fix, e.g. "44"


def parse_example(statement: str, path: str) -> Example:
    """The call of a micro problem statement and its expected printed value; `path` is
    the module's file."""
    parsed = parse_statement(statement)
    expected = str(pyast.literal_eval(parsed.expected))  # print() shows str, not repr
    module = Path(path).with_suffix("").as_posix().replace("/", ".")
    return Example(module, parsed.function, parsed.call, expected)


def check_command(example: Example) -> str:
    """A shell command that prints the example call's result.

    `-B`: a run before the edit must not leave bytecode behind, because Python trusts a
    cached .pyc whose source has the same size and mtime second, which a one-character fix
    made within the same second has.
    """
    code = f"from {example.module} import {example.function}; print({example.call})"
    escaped = re.sub(r'(["\\$`])', r"\\\1", code)  # inside bash double quotes
    return f'python -B -c "{escaped}"'


def shortest_edit(lines: list[str], change: GoldChange) -> tuple[str, str]:
    """`old` and `new` for edit_file: the changed lines, indentation of the first cut off,
    widened by neighbouring lines until `old` occurs exactly once in the file."""
    if tuple(lines[change.start : change.end]) != change.old:
        raise ValueError(f"{change.path}: the file does not hold the patch's lines")
    text = "\n".join(lines)
    for a, b in edit_windows(change.start, change.end, len(lines)):
        old = "\n".join(lines[a:b])
        new = "\n".join([*lines[a : change.start], *change.new, *lines[change.end : b]])
        indent = old[: len(old) - len(old.lstrip())]
        if new.startswith(indent):  # the model copies less, and `old` still anchors the edit
            old, new = old[len(indent) :], new[len(indent) :]
        if old and text.count(old) == 1:
            return old, new
    raise ValueError(f"{change.path}: no unique text around the change")


def slipped(old: str, text: str, rng: random.Random) -> str:
    """`old` with one mis-copied token, no longer found in the file `text`: a number one
    off, else a quoted letter one off, else a name with its last letter changed.

    ValueError if no such change leaves `old` absent from the file.
    """
    for pattern in (r"\b\d+\b", r"'[a-z]'", r"\b[a-z_]\w*\b"):
        matches = list(re.finditer(pattern, old))
        rng.shuffle(matches)
        for match in matches:
            token = match[0]
            if token.isdigit():
                wrong = str(int(token) + rng.choice([-1, 1]) if token != "0" else 1)
            else:
                at = -2 if token.startswith("'") else -1
                others = [c for c in string.ascii_lowercase if c != token[at]]
                wrong = token[:at] + rng.choice(others) + token[len(token) + at + 1 :]
            candidate = old[: match.start()] + wrong + old[match.end() :]
            if candidate not in text:
                return candidate
    raise ValueError("no mis-copy of the edit's text is absent from the file")


def wrong_fix(lines: list[str], change: GoldChange, rng: random.Random) -> tuple[str, ...]:
    """The lines `change` replaces, changed the wrong way, still parsing and neither the
    buggy nor the fixed lines: a mutation of the buggy or the fixed lines
    (fleetrl.envs.tasks.mutations), or where there is none, one name of the fixed lines swapped
    for another name of the file.

    ValueError if there is neither, as for an insertion (no buggy line to change).
    """
    if change.start == change.end:
        raise ValueError(f"{change.path}: no wrong way to change an insertion")
    mutated = set()
    for version in (lines, _spliced(lines, change, change.new)):
        source = "\n".join(version) + "\n"
        for mutation in find_mutations(change.path, source):
            result = mutation.apply(source).split("\n")[:-1]
            if len(result) == len(lines):  # elsewhere, it leaves the bug or the fix: dropped below
                mutated.add(tuple(result[change.start : change.end]))
    names = sorted(set(_NAME.findall("\n".join(lines))) - set(keyword.kwlist))
    swapped = set()
    for i, line in enumerate(change.new):
        for match in _NAME.finditer(line):
            for name in names:
                edited = line[: match.start()] + name + line[match.end() :]
                swapped.add((*change.new[:i], edited, *change.new[i + 1 :]))
    for candidates in (mutated, swapped):
        wrong = [
            c
            for c in sorted(candidates - {change.old, change.new})
            if _parses(_spliced(lines, change, c))
        ]
        if wrong:
            return rng.choice(wrong)
    raise ValueError(f"{change.path}: no wrong way to change the buggy lines")


def _spliced(lines: list[str], change: GoldChange, new: tuple[str, ...]) -> list[str]:
    """The file's `lines` with the lines `change` replaces replaced by `new` instead."""
    return [*lines[: change.start], *new, *lines[change.end :]]


def _parses(lines: list[str]) -> bool:
    """Whether a file of these lines parses as Python."""
    try:
        pyast.parse("\n".join(lines))
    except SyntaxError:
        return False
    return True


def _file_lines(read_output: str) -> list[str]:
    """The file's lines from read_file's numbered output (`N: line`)."""
    return [line.split(": ", 1)[1] if ": " in line else "" for line in read_output.split("\n")]


def _last_result(turn: str) -> str:
    """The last tool result of one assistant turn (its reply and the results it got)."""
    results = tool_results(turn)
    return results[-1] if results else ""


def _latest_read(turns: list[str], path: str) -> list[str]:
    """`path`'s lines as the latest turn that did nothing but read it showed them.

    ValueError if no turn did."""
    for turn in reversed(turns):
        reply, _, rest = turn.partition(IM_END)
        calls = parse_reply(reply).tool_calls
        results = tool_results(rest)
        if (
            len(calls) == 1
            and calls[0].name == "read_file"
            and calls[0].arguments.get("path") == path
            and len(results) == 1
            and not results[0].startswith("error")
        ):
            return _file_lines(results[0])
    raise ValueError(f"{path}: the episode never read the file to edit")


@dataclass(frozen=True)
class _Solution:
    """What the expert knows of one task: where the fix goes and how to check it."""

    task_id: str
    change: GoldChange
    example: Example


class Expert:
    """A TokenPolicy that solves the micro tasks of `tasks` by one plan, deciding from its
    context; `problems[instance_id]` collects what went wrong per task."""

    def __init__(
        self,
        tasks: list[Task],
        plan: str | tuple[str, ...],
        tokenizer: Tokenizer,
        after: int = 0,
    ) -> None:
        """`plan`: a key of PLANS, or the steps themselves (RECOVER). `after`: replies
        another policy sent before the expert takes over; the plan starts at the next one.
        ValueError if a task is no micro task or two tasks share a problem statement."""
        self.plan = PLANS[plan] if isinstance(plan, str) else plan
        self.after = after
        self.tokenizer = tokenizer
        self.problems: dict[str, list[str]] = {task.instance_id: [] for task in tasks}
        self.unlearned: dict[str, list[list[int]]] = {task.instance_id: [] for task in tasks}
        self._solutions: dict[str, _Solution] = {}
        for task in tasks:
            other = self._solutions.get(task.problem_statement)
            if other is not None:
                raise ValueError(
                    f"{task.instance_id} and {other.task_id} have the same problem statement"
                )
            change = gold_change(task.patch)
            example = parse_example(task.problem_statement, change.path)
            self._solutions[task.problem_statement] = _Solution(task.instance_id, change, example)

    def _solution(self, context: str) -> _Solution:
        """The task whose problem statement is the context's (first) user turn."""
        match = USER_TURN.search(context)
        solution = self._solutions.get(match[1]) if match else None
        if solution is None:
            shown = match[1][:80] if match else context[:80]
            raise LookupError(f"the prompt states no problem of the expert's tasks: {shown!r}")
        return solution

    def _reply(self, solution: _Solution, turn: int, turns: list[str]) -> Message:
        """The assistant message for the plan's 0-based `turn`, the last of the context's
        `turns` (each a reply with the tool results it got)."""
        results = [_last_result(t) for t in turns[self.after : -1]]
        problems = self.problems[solution.task_id]
        steps = self.plan
        done = steps[:turn]
        if done and done[-1] == "edit" and not results[-1].startswith("edited "):
            problems.append(f"edit refused: {results[-1]}")
        if done and done[-1] == "slip" and not results[-1].startswith(REFUSED):
            problems.append(f"slip not refused: {results[-1]}")
        if done and done[-1] == "wrong" and not results[-1].startswith("edited "):
            problems.append(f"wrong fix refused: {results[-1]}")
        shown = f"exit code: 0\n{solution.example.expected}"
        if done and done[-1] == "check" and "edit" in done and results[-1] != shown:
            problems.append(f"check printed {results[-1]!r}, expected {shown!r}")
        exposed = "wrong" in done and "edit" not in done  # the run after the wrong fix
        if done and done[-1] == "check" and exposed and results[-1] == shown:
            problems.append("the wrong fix printed the expected value")
        step = steps[turn] if turn < len(steps) and not problems else "finish"
        path = solution.change.path
        if step == "list":
            call = ToolCall("list_dir", {})
        elif step == "read":
            call = ToolCall("read_file", {"path": path})
        elif step in ("edit", "slip", "wrong"):
            lines = _latest_read(turns, path)
            change = solution.change
            if "wrong" in steps[: turn + 1]:
                wrong = wrong_fix(lines, change, random.Random(f"wrong-{solution.task_id}"))
                if step == "wrong":
                    change = replace(change, new=wrong)
                else:  # the file as the wrong edit left it
                    lines = _spliced(lines, change, wrong)
                    change = replace(change, old=wrong)
            old, new = shortest_edit(lines, change)
            if step == "slip":
                rng = random.Random(f"slip-{solution.task_id}")
                old = slipped(old, "\n".join(lines), rng)
            call = ToolCall("edit_file", {"path": path, "old": old, "new": new})
        elif step == "check":
            call = ToolCall("run", {"command": check_command(solution.example)})
        else:
            call = ToolCall("finish", {})
        return Message("assistant", "", [call])

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """The next reply's ids, as a model that never errs would sample them."""
        context = self.tokenizer.decode(prompt_ids)
        solution = self._solution(context)
        problems = self.problems[solution.task_id]
        turns = context.split(GENERATION_PROMPT)[1:]  # the last one: this turn, still empty
        turn = len(turns) - 1 - self.after
        try:
            message = self._reply(solution, turn, turns)
        except ValueError as err:
            problems.append(str(err))
            message = Message("assistant", "", [ToolCall("finish", {})])
        ids = self.tokenizer.encode(format_reply(message) + IM_END)
        if 0 <= turn < len(self.plan) and self.plan[turn] in UNLEARNED_STEPS and not problems:
            self.unlearned[solution.task_id].append(ids)
        return scripted_completion(prompt_ids, ids, params, self.tokenizer.eos_id, problems)
