"""Expert demonstrations: the micro training tasks solved through the real harness.

    train task ─▶ Expert (a scripted TokenPolicy that knows the gold patch)
        ─▶ run_episode(micro_harness()) in a real sandbox ─▶ the agent's changes
        ─▶ verifier (hidden tests, anti-cheat) ─▶ kept iff reward 1 and no surprise
        ─▶ Demo: the harness's own token ids and loss mask (1 = the expert's replies)

The expert decides every reply from its context, like a model would: it decodes the prompt
ids, counts its earlier turns and reads the tool results. Only the fix itself comes from
outside, from the gold patch. A plan (PLANS) fixes the order of its tool calls:
`read_file` of the module, `edit_file(path, old, new)` with the shortest unique `old` (the
changed line without its indentation, widened by neighbouring lines until the file holds
it exactly once), `run` of the call from the problem statement (the hidden tests are not in
the workspace), `finish`. Plans vary the order a little (look at the folder first,
reproduce the bug before fixing it), which gives the model more than one path to learn.

Contract: a Demo's ids are exactly what `run_episode` recorded, so a model trained on them
sees at training time the prompt, tool-result and reply tokens it will see at RL time. A
demonstration is dropped, with its reason, when the expert saw anything it did not expect
(an edit refused, a wrong value printed) or the verifier did not give reward 1.
Generating all of them takes about a minute; `load_or_generate_demos` caches them.

Not covered: mistakes and recovery (the expert makes none); patches touching more than one
file or hunk (micro patches are one single-line change or insertion).
"""

from __future__ import annotations

import ast
import asyncio
import gzip
import hashlib
import io
import json
import os
import random
import re
import string
import tempfile
import time
import tokenize
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.progress import Progress

from fleetrl.envs.harness import Episode, HarnessConfig, micro_harness, run_episode
from fleetrl.envs.micro import RESERVED_NAMES
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks import cache_dir, commit_all, ensure_repo, unified_diff
from fleetrl.envs.verifier import Changes, sandbox_changes, verify
from fleetrl.model.chat import GENERATION_PROMPT, IM_END, Message, ToolCall, format_reply
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Completion, SamplingParams, Task

DEMO_VERSION = "1"  # part of the cache key: change it whenever the expert's replies change
PLANS: dict[str, tuple[str, ...]] = {
    "fix": ("read", "edit", "check", "finish"),
    "look_first": ("list", "read", "edit", "check", "finish"),
    "reproduce": ("read", "check", "edit", "check", "finish"),
}
_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)
_STATEMENT = re.compile(
    r"^`(?P<call>(?P<function>\w+)\(.*\))` should return (?P<expected>.*), "
    r"but it (?:returns .*|raises \w+)\.$",
    re.DOTALL,
)


@dataclass(frozen=True)
class GoldChange:
    """The gold patch as one change to the buggy file: lines[start:end] become `new`."""

    path: str  # workspace-relative path of the module
    start: int  # 0-based index of the first buggy line replaced (insertion point if none)
    end: int  # index after the last buggy line replaced (== start for an insertion)
    old: tuple[str, ...]  # the buggy lines replaced, as the patch shows them
    new: tuple[str, ...]  # the lines that take their place


@dataclass(frozen=True)
class Example:
    """The call in a micro problem statement and what it should print once fixed."""

    module: str  # module to import the function from
    function: str
    call: str  # e.g. "nkims([4, 8])"
    expected: str  # what `print(call)` shows after the fix, e.g. "44"


@dataclass
class Demo:
    """One demonstration, as the harness recorded it (a single context window)."""

    task_id: str
    plan: str  # key of PLANS
    token_ids: list[int]  # prompt, expert replies and tool results, in order
    loss_mask: list[int]  # 1 on the expert's reply tokens (each ends with <|im_end|>)


@dataclass
class DemoStats:
    """What generating a set of demonstrations gave."""

    episodes: int  # episodes run: tasks x plans, plus tasks x copies
    kept: int
    graded: int = 0  # episodes also graded by the verifier (those of the original tasks)
    dropped: dict[str, str] = field(default_factory=dict)  # "task_id/plan" -> reason
    mean_tokens: float = 0.0  # per kept demo, whole sequence
    mean_reply_tokens: float = 0.0  # per kept demo, loss_mask == 1
    max_tokens: int = 0
    duration_s: float = 0.0


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


def _windows(start: int, end: int, n_lines: int) -> list[tuple[int, int]]:
    """Line ranges around the change, smallest first; one more line above before below."""
    out = []
    for extra in range(n_lines + 1):
        for up in range(extra, -1, -1):
            a, b = start - up, end + extra - up
            if a >= 0 and b <= n_lines and b > a:
                out.append((a, b))
    return out


def shortest_edit(lines: list[str], change: GoldChange) -> tuple[str, str]:
    """`old` and `new` for edit_file: the changed lines, indentation of the first cut off,
    widened by neighbouring lines until `old` occurs exactly once in the file."""
    if tuple(lines[change.start : change.end]) != change.old:
        raise ValueError(f"{change.path}: the file does not hold the patch's lines")
    text = "\n".join(lines)
    for a, b in _windows(change.start, change.end, len(lines)):
        old = "\n".join(lines[a:b])
        new = "\n".join([*lines[a : change.start], *change.new, *lines[change.end : b]])
        indent = old[: len(old) - len(old.lstrip())]
        if new.startswith(indent):  # the model copies less, and `old` still anchors the edit
            old, new = old[len(indent) :], new[len(indent) :]
        if old and text.count(old) == 1:
            return old, new
    raise ValueError(f"{change.path}: no unique text around the change")


def parse_example(statement: str, path: str) -> Example:
    """The call and its expected printed value from a micro problem statement."""
    match = _STATEMENT.match(statement)
    if match is None:
        raise ValueError(f"not a micro problem statement: {statement!r}")
    expected = str(ast.literal_eval(match["expected"]))  # print() shows str, not repr
    module = Path(path).with_suffix("").as_posix().replace("/", ".")
    return Example(module, match["function"], match["call"], expected)


def check_command(example: Example) -> str:
    """A shell command that prints the example call's result.

    `-B`: a run before the edit must not leave bytecode behind, because Python trusts a
    cached .pyc whose source has the same size and mtime second, which a one-character fix
    made within the same second has.
    """
    code = f"from {example.module} import {example.function}; print({example.call})"
    escaped = re.sub(r'(["\\$`])', r"\\\1", code)  # inside bash double quotes
    return f'python -B -c "{escaped}"'


def _file_lines(read_output: str) -> list[str]:
    """The file's lines from read_file's numbered output (`N: line`)."""
    return [line.split(": ", 1)[1] if ": " in line else "" for line in read_output.split("\n")]


class Expert:
    """A TokenPolicy that solves one micro task by one plan, deciding from its context.

    `problems` lists everything that went differently than a correct fix would go; a
    demonstration with problems is not kept.
    """

    def __init__(self, task: Task, plan: str, tokenizer: Tokenizer) -> None:
        self.plan = PLANS[plan]
        self.change = gold_change(task.patch)
        self.example = parse_example(task.problem_statement, self.change.path)
        self.tokenizer = tokenizer
        self.problems: list[str] = []

    def reply(self, turn: int, results: list[str]) -> Message:
        """The assistant message for 0-based `turn`, given the tool results so far."""
        steps = self.plan
        done = steps[:turn]
        if done and done[-1] == "edit" and not results[-1].startswith("edited "):
            self.problems.append(f"edit refused: {results[-1]}")
        if done and done[-1] == "check" and "edit" in done:
            shown = f"exit code: 0\n{self.example.expected}"
            if results[-1] != shown:
                self.problems.append(f"check printed {results[-1]!r}, expected {shown!r}")
        step = steps[turn] if turn < len(steps) and not self.problems else "finish"
        path = self.change.path
        if step == "list":
            call = ToolCall("list_dir", {})
        elif step == "read":
            call = ToolCall("read_file", {"path": path})
        elif step == "edit":
            lines = _file_lines(results[steps.index("read")])
            old, new = shortest_edit(lines, self.change)
            call = ToolCall("edit_file", {"path": path, "old": old, "new": new})
        elif step == "check":
            call = ToolCall("run", {"command": check_command(self.example)})
        else:
            call = ToolCall("finish", {})
        return Message("assistant", "", [call])

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        """The next reply's ids, as a model that never errs would sample them."""
        context = self.tokenizer.decode(prompt_ids)
        turn = context.count(GENERATION_PROMPT) - 1  # the last one is this turn's opening
        try:
            message = self.reply(turn, _RESPONSE.findall(context))
        except ValueError as err:
            self.problems.append(str(err))
            message = Message("assistant", "", [ToolCall("finish", {})])
        ids = self.tokenizer.encode(format_reply(message) + IM_END)
        if len(ids) > params.max_tokens:
            self.problems.append(f"reply of {len(ids)} tokens exceeds the budget")
            ids = ids[: params.max_tokens]
        stopped = ids[-1] == self.tokenizer.eos_id
        return Completion(
            prompt_ids=list(prompt_ids),
            token_ids=ids,
            logprobs=[0.0] * len(ids),
            versions=[0] * len(ids),
            finish_reason="stop" if stopped else "length",
        )


def _bound_names(source: str) -> tuple[set[str], set[str]]:
    """(functions, other names) a module binds: defs, parameters, assignment targets."""
    functions: set[str] = set()
    others: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef):
            functions.add(node.name)
        elif isinstance(node, ast.arg):
            others.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            others.add(node.id)
    return functions, others - functions


def rename(source: str, mapping: dict[str, str]) -> str:
    """`source` with every name token in `mapping` replaced; attributes (after a dot),
    strings and numbers are kept, so the code means what it meant."""
    lines = source.splitlines(keepends=True)
    spans = []
    previous = ""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string in mapping and previous != ".":
            spans.append((token.start, token.end, mapping[token.string]))
        if token.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
            previous = token.string
    for (row, col), (_, end), name in reversed(spans):  # right to left keeps columns valid
        lines[row - 1] = lines[row - 1][:col] + name + lines[row - 1][end:]
    return "".join(lines)


def _fresh_name(rng: random.Random, lengths: tuple[int, int], taken: set[str]) -> str:
    """Random lowercase letters, like the micro suite's names, unused and not reserved."""
    while True:
        name = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(*lengths)))
        if name not in taken and name not in RESERVED_NAMES:
            taken.add(name)
            return name


def renamed_copy(task: Task, rng: random.Random, dest: Path) -> Task:
    """A copy of a micro task whose module binds fresh random names (the function, its
    helper, parameters and locals), its repository written into the new folder `dest`.

    Code, constants, string literals, calls and expected values stay as they are, so the
    gold fix, the tests and the problem statement carry over with the names replaced. It
    multiplies the training tasks without leaving the training split's distribution:
    micro names are random letters in both splits, and what separates held-out tasks
    (their constants and literal letters) is untouched.
    """
    change = gold_change(task.patch)
    buggy = (ensure_repo(task) / change.path).read_text(encoding="utf-8")
    lines = buggy.splitlines(keepends=True)
    fixed = [line + "\n" for line in change.new]
    correct = "".join([*lines[: change.start], *fixed, *lines[change.end :]])
    tests = "".join(
        line[1:] + "\n"
        for line in task.test_patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    )
    function = Path(change.path).stem  # a micro module is named after its function
    functions, others = _bound_names(buggy)
    more_functions, more_others = _bound_names(correct)
    taken: set[str] = set()
    mapping = {name: _fresh_name(rng, (4, 5), taken) for name in sorted(functions | more_functions)}
    for name in sorted((others | more_others) - set(mapping)):
        mapping[name] = _fresh_name(rng, (1, 3), taken)
    if function not in mapping or not task.problem_statement.startswith(f"`{function}("):
        raise ValueError(f"{task.instance_id}: not a micro task")
    new_function = mapping[function]
    module, test_file = f"{new_function}.py", f"test_{new_function}.py"
    old_test_file = f"test_{function}.py"
    dest.mkdir(parents=True)
    new_buggy = rename(buggy, mapping)
    (dest / module).write_text(new_buggy, encoding="utf-8")
    return replace(
        task,
        instance_id=f"{task.instance_id}-{new_function}",
        repo=str(dest),
        base_commit=commit_all(dest),
        problem_statement=f"`{new_function}" + task.problem_statement[len(function) + 1 :],
        patch=unified_diff(module, new_buggy, rename(correct, mapping)),
        test_patch=unified_diff(test_file, None, rename(tests, mapping)),
        FAIL_TO_PASS=[node.replace(old_test_file, test_file) for node in task.FAIL_TO_PASS],
        PASS_TO_PASS=[node.replace(old_test_file, test_file) for node in task.PASS_TO_PASS],
        suite="",  # not a bundled task: its repository exists only while it is used
        test_files=[test_file],
    )


async def _episode(
    task: Task, plan: str, tokenizer: Tokenizer, harness: HarnessConfig, backend: str
) -> tuple[Episode, Changes, list[str]]:
    """One expert episode in a fresh sandbox: the episode, its changes, the expert's problems."""
    expert = Expert(task, plan, tokenizer)
    repo = await asyncio.to_thread(ensure_repo, task)
    sandbox = await asyncio.to_thread(open_sandbox, repo, backend)
    try:
        episode = await run_episode(expert, tokenizer, sandbox, task, harness)
        changes = await asyncio.to_thread(sandbox_changes, sandbox, repo)
    finally:
        await asyncio.to_thread(sandbox.close)
    return episode, changes, expert.problems


def _outcome(
    task: Task, plan: str, episode: Episode, problems: list[str]
) -> tuple[Demo | None, str]:
    """The demo of a finished expert episode, or why it is not one (before grading)."""
    trajectory = episode.trajectory
    if problems:
        return None, "; ".join(problems)
    if trajectory.finish_reason != "finish" or trajectory.tool_errors:
        return None, f"ended by {trajectory.finish_reason}, {trajectory.tool_errors} tool errors"
    (segment,) = trajectory.segments
    return Demo(task.instance_id, plan, segment.token_ids, segment.loss_mask), ""


async def demonstrate_task(
    task: Task,
    plans: list[str],
    tokenizer: Tokenizer,
    harness: HarnessConfig,
    backend: str = "auto",
    grade: bool = True,
) -> list[tuple[Demo | None, str]]:
    """Run the expert on `task` by each plan: per plan (demo, "") or (None, reason).

    With `grade`, the verifier must also give reward 1. Episodes that leave identical
    changes are graded once, with all their tool calls: the hidden tests are deterministic,
    and grading costs ~10x an expert episode. Without it, the expert's own checks decide
    (its edit was accepted and the example prints the expected value).
    """
    runs = [await _episode(task, plan, tokenizer, harness, backend) for plan in plans]
    outcomes = [
        _outcome(task, plan, episode, problems)
        for plan, (episode, _, problems) in zip(plans, runs, strict=True)
    ]
    if not grade:
        return outcomes
    calls: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for episode, changes, _ in runs:
        key = repr(sorted(changes.items()))
        calls.setdefault(key, []).extend((r.name, r.arguments) for r in episode.tool_log)
    for key, key_calls in calls.items():
        changes = next(ch for _, ch, _ in runs if repr(sorted(ch.items())) == key)
        result = await asyncio.to_thread(verify, task, changes, key_calls)
        if result.reward == 1.0:
            continue
        for i, (_, run_changes, _) in enumerate(runs):
            if repr(sorted(run_changes.items())) == key and outcomes[i][0] is not None:
                outcomes[i] = (None, f"verifier: tests {result.tests}, flags {result.flags}")
    return outcomes


async def demonstrate_copy(
    task: Task,
    copy: int,
    plan: str,
    tokenizer: Tokenizer,
    harness: HarnessConfig,
    backend: str = "auto",
) -> tuple[Demo | None, str]:
    """The expert on renamed copy number `copy` of `task` (seeded by both), checked by the
    expert's own checks; the copy's repository is deleted afterwards."""
    rng = random.Random(f"fleetrl-demos-{DEMO_VERSION}-{task.instance_id}-{copy}")
    with tempfile.TemporaryDirectory(prefix="fleetrl-demo-") as tmp:
        renamed = await asyncio.to_thread(renamed_copy, task, rng, Path(tmp) / "repo")
        (outcome,) = await demonstrate_task(renamed, [plan], tokenizer, harness, backend, False)
    return outcome


def generate_demos(
    tasks: list[Task],
    tokenizer: Tokenizer,
    plans: list[str] | None = None,
    copies: int = 0,
    harness: HarnessConfig | None = None,
    concurrency: int = 4,
    progress: bool = True,
) -> tuple[list[Demo], DemoStats]:
    """Demonstrations of `tasks`, in task order: one per task and plan (all plans by
    default), graded by the verifier, then `copies` renamed copies per task (each by the
    next plan in turn), checked by the expert."""
    plans = plans or list(PLANS)
    harness = harness or micro_harness()
    start = time.monotonic()

    async def run_all() -> list[tuple[str, tuple[Demo | None, str]]]:
        gate = asyncio.Semaphore(concurrency)  # jobs in flight: sandboxes, pytest runs
        with Progress(disable=not progress, transient=True) as bar:
            bar_task = bar.add_task("demonstrations", total=len(tasks) * (1 + copies))

            async def original(task: Task) -> list[tuple[str, tuple[Demo | None, str]]]:
                async with gate:
                    outcomes = await demonstrate_task(task, plans, tokenizer, harness)
                bar.advance(bar_task)
                return [
                    (f"{task.instance_id}/{p}", o) for p, o in zip(plans, outcomes, strict=True)
                ]

            async def copied(
                i: int, task: Task, k: int
            ) -> list[tuple[str, tuple[Demo | None, str]]]:
                plan = plans[(i + k) % len(plans)]
                async with gate:
                    outcome = await demonstrate_copy(task, k, plan, tokenizer, harness)
                bar.advance(bar_task)
                return [(f"{task.instance_id}/copy{k}/{plan}", outcome)]

            jobs = [original(task) for task in tasks]
            jobs += [copied(i, task, k) for i, task in enumerate(tasks) for k in range(copies)]
            done = await asyncio.gather(*jobs)
            return [entry for entries in done for entry in entries]

    outcomes = asyncio.run(run_all())
    demos = [demo for _, (demo, _) in outcomes if demo is not None]
    n = max(len(demos), 1)
    stats = DemoStats(
        episodes=len(outcomes),
        kept=len(demos),
        graded=len(tasks) * len(plans),
        dropped={name: reason for name, (demo, reason) in outcomes if demo is None},
        mean_tokens=sum(len(d.token_ids) for d in demos) / n,
        mean_reply_tokens=sum(sum(d.loss_mask) for d in demos) / n,
        max_tokens=max((len(d.token_ids) for d in demos), default=0),
        duration_s=time.monotonic() - start,
    )
    return demos, stats


def _cache_key(
    tasks: list[Task], tokenizer: Tokenizer, plans: list[str], copies: int, harness: HarnessConfig
) -> str:
    """A digest of everything a demonstration's tokens depend on."""
    digest = hashlib.sha256(DEMO_VERSION.encode())
    for task in tasks:
        digest.update(f"{task.instance_id} {task.base_commit} {task.patch}".encode())
    digest.update(tokenizer.backend.to_str().encode())
    digest.update(repr((plans, copies, harness)).encode())
    return digest.hexdigest()[:16]


def load_or_generate_demos(
    tasks: list[Task],
    tokenizer: Tokenizer,
    plans: list[str] | None = None,
    copies: int = 0,
    cache: Path | None = None,
    progress: bool = True,
) -> tuple[list[Demo], DemoStats]:
    """`generate_demos` with the micro preset, cached under `cache` (default: the fleetrl
    cache dir) by a key over tasks, tokenizer, plans, copies and harness, so reruns skip it."""
    plans = plans or list(PLANS)
    harness = micro_harness()
    folder = cache or cache_dir() / "demos"
    path = folder / f"demos-{_cache_key(tasks, tokenizer, plans, copies, harness)}.json.gz"
    if path.is_file():
        data = json.loads(gzip.decompress(path.read_bytes()))
        return [Demo(**d) for d in data["demos"]], DemoStats(**data["stats"])
    demos, stats = generate_demos(tasks, tokenizer, plans, copies, harness, progress=progress)
    folder.mkdir(parents=True, exist_ok=True)
    data = {"demos": [asdict(d) for d in demos], "stats": asdict(stats)}
    partial = path.with_suffix(f".tmp{os.getpid()}")
    partial.write_bytes(gzip.compress(json.dumps(data).encode()))
    partial.rename(path)  # readers never see half a file
    return demos, stats
