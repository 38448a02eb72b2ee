"""Names in micro code: those a generated identifier must avoid, and renamed copies.

A renamed copy of a micro task binds fresh random names (the function, its helper,
parameters and locals) and keeps everything else: code, constants, string literals,
calls and expected values. The gold fix, the hidden tests and the problem statement carry
over with the names replaced, so the copy is a new task of the same meaning. It multiplies
the training tasks without leaving the training split's distribution: micro names are
random letters in both splits, and what separates held-out tasks (their constants and
literal letters) is untouched.

Renaming works on tokens (`tokenize`), not text: attributes after a dot, strings, numbers
and comments keep their spelling. Not covered: code whose names come from outside the
module (imports, globals), which micro modules do not have.
"""

from __future__ import annotations

import ast
import builtins
import io
import keyword
import random
import string
import sys
import tokenize
from dataclasses import dataclass, replace
from pathlib import Path

from fleetrl.envs import pyast
from fleetrl.envs.anticheat.episode import NETWORK_PROGRAMS
from fleetrl.envs.micro.gold import gold_change
from fleetrl.envs.micro.statement import rename_function
from fleetrl.envs.tasks.git import commit_all, flat_commit_sha, unified_diff
from fleetrl.types import Task

# Names a generated identifier must not take: Python's own, and modules the test run imports.
RESERVED_NAMES = (
    set(keyword.kwlist)
    | set(keyword.softkwlist)
    | set(dir(builtins))
    | set(sys.stdlib_module_names)
    | {"py", "pytest", "pluggy", "conftest", "test", "tests"}
)
# A function's name is also in the `run` command that checks it, where the verifier must
# not read it as a network program.
RESERVED_FUNCTION_NAMES = RESERVED_NAMES | set(NETWORK_PROGRAMS)


def bound_names(source: str) -> tuple[set[str], set[str]]:
    """(functions, other names) a module binds: defs, parameters, assignment targets."""
    functions: set[str] = set()
    others: set[str] = set()
    for node in ast.walk(pyast.parse(source)):
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


def fresh_name(
    rng: random.Random, lengths: tuple[int, int], taken: set[str], reserved: set[str]
) -> str:
    """Random lowercase letters, like the micro suite's names, not in `taken` (which then
    holds it) nor in `reserved`."""
    while True:
        name = "".join(rng.choices(string.ascii_lowercase, k=rng.randint(*lengths)))
        if name not in taken and name not in reserved:
            taken.add(name)
            return name


@dataclass(frozen=True)
class RenamedCopy:
    """A renamed copy of a task, its repository not yet written."""

    task: Task  # the copy's record; `task.repo` is where `write` puts the repository
    path: str  # its buggy module, the only file of its base tree
    source: str  # that module's text

    def write(self) -> Path:
        """Write the copy's repository (its one commit is `task.base_commit`)."""
        repo = Path(self.task.repo)
        repo.mkdir(parents=True)
        (repo / self.path).write_text(self.source, encoding="utf-8")
        sha = commit_all(repo)
        if sha != self.task.base_commit:
            raise ValueError(f"{self.task.instance_id}: wrote commit {sha}, not base_commit")
        return repo


def renamed_copy(task: Task, repo: Path, rng: random.Random, dest: Path) -> RenamedCopy:
    """A copy of the micro task whose repository is `repo`, with fresh names drawn from
    `rng`; its own repository is to be written at `dest` (`RenamedCopy.write`).

    The copy's instance id is the original's followed by the new function name; it
    belongs to no suite, so its repository exists only while it is used.
    """
    change = gold_change(task.patch)
    buggy = (repo / change.path).read_text(encoding="utf-8")
    lines = buggy.splitlines(keepends=True)
    fixed = [line + "\n" for line in change.new]
    correct = "".join([*lines[: change.start], *fixed, *lines[change.end :]])
    tests = "".join(
        line[1:] + "\n"
        for line in task.test_patch.splitlines()
        if line.startswith("+") and not line.startswith("+++")
    )
    function = Path(change.path).stem  # a micro module is named after its function
    functions, others = bound_names(buggy)
    more_functions, more_others = bound_names(correct)
    taken: set[str] = set()
    mapping = {
        name: fresh_name(rng, (4, 5), taken, RESERVED_FUNCTION_NAMES)
        for name in sorted(functions | more_functions)
    }
    for name in sorted((others | more_others) - set(mapping)):
        mapping[name] = fresh_name(rng, (1, 3), taken, RESERVED_NAMES)
    if function not in mapping:
        raise ValueError(f"{task.instance_id}: not a micro task")
    new_function = mapping[function]
    statement = rename_function(task.problem_statement, function, new_function)
    module, test_file = f"{new_function}.py", f"test_{new_function}.py"
    old_test_file = f"test_{function}.py"
    new_buggy = rename(buggy, mapping)
    copy = replace(
        task,
        instance_id=f"{task.instance_id}-{new_function}",
        repo=str(dest),
        base_commit=flat_commit_sha({module: new_buggy.encode()}),
        problem_statement=statement,
        patch=unified_diff(module, new_buggy, rename(correct, mapping)),
        test_patch=unified_diff(test_file, None, rename(tests, mapping)),
        FAIL_TO_PASS=[node.replace(old_test_file, test_file) for node in task.FAIL_TO_PASS],
        PASS_TO_PASS=[node.replace(old_test_file, test_file) for node in task.PASS_TO_PASS],
        suite="",
        test_files=[test_file],
    )
    return RenamedCopy(copy, module, new_buggy)
