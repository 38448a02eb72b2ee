"""The gold-patch guide on patches and files this module writes: the hunks it reads, the edits
it sends (unique, as short as the file allows), its steps and its replies from the context;
and the registry handing out each task's guide. Its episodes under the real verifier, on a
folder made by the task generator: tests/env/rollout/test_guide_folder.py."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

import pytest

from fleetrl.config import HarnessSection
from fleetrl.envs.harness.loop import task_prompt
from fleetrl.envs.micro.expert import PLANS, Expert
from fleetrl.envs.micro.guide import MICRO_GUIDE
from fleetrl.envs.tasks import guide, suites
from fleetrl.envs.tasks.gold_guide import (
    GOLD_PATCH_GUIDE,
    Hunk,
    check_command,
    parse_patch,
    script,
    unique_edit,
)
from fleetrl.envs.tasks.suites import Suite, get_task, guide_for
from fleetrl.model.chat import Message, ToolCall, encode_chat, parse_reply
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.types import SamplingParams, Task

TOKENIZER = bundled_tokenizer()
HARNESS = HarnessSection()

LIB = "def double(x):\n    return x + 2\n\n\ndef triple(x):\n    return x + 2\n"
LIB_PATCH = (
    "diff --git a/lib.py b/lib.py\n"
    "index 1111111..2222222 100644\n"
    "--- a/lib.py\n"
    "+++ b/lib.py\n"
    "@@ -1,5 +1,5 @@\n"
    " def double(x):\n"
    "-    return x + 2\n"
    "+    return x * 2\n"
    " \n"
    " \n"
    " def triple(x):\n"
)


def folder_task(tmp_path: Path, files: dict[str, str], patch: str) -> Task:
    """A task outside the bundled suites (as `fleetrl tasks make` writes them), its
    repository `files` under tmp_path."""
    repo = tmp_path / "repo"
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    statement = "These tests fail but should pass:\n\n- test_lib.py::test_double\n"
    return Task("lib__op", str(repo), "0" * 40, statement, patch, "", [], [])


def test_a_patch_reads_as_its_files_and_the_changed_lines_of_each_hunk():
    (lib,) = parse_patch(LIB_PATCH)
    assert (lib.path, lib.created) == ("lib.py", False)
    assert lib.hunks == (Hunk(1, ("    return x + 2",), ("    return x * 2",)),)
    two = LIB_PATCH + "@@ -9,2 +9,3 @@ def f():\n     a = 1\n+    b = 2\n     return a\n"
    assert parse_patch(two)[0].hunks[1] == Hunk(9, (), ("    b = 2",))
    # git diff -U0: an insertion after line 3 has no context to count
    bare = "--- a/m.py\n+++ b/m.py\n@@ -3,0 +4 @@\n+x = 1\n"
    assert parse_patch(bare)[0].hunks == (Hunk(3, (), ("x = 1",)),)
    new = "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n"
    (created,) = parse_patch(new + "@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n")
    assert created.created and created.hunks == (Hunk(0, (), ("a = 1", "b = 2")),)


@pytest.mark.parametrize(
    ("patch", "why"),
    [
        ("--- a/m.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-x = 1\n", "deletes a file"),
        ("diff --git a/m.py b/n.py\nrename from m.py\nrename to n.py\n", "cannot make"),
        ("--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n\\ No newline at end of file\n",
         "without a newline"),
        ("not a diff", "not a unified diff"),
        ("--- a/m.py\n+++ b/m.py\n@@ -1,3 +1,3 @@\n-x = 1\n+x = 2\n", "ends before"),
    ],
)  # fmt: skip
def test_patches_the_tools_cannot_make_are_refused(patch, why):
    with pytest.raises(ValueError, match=why):
        parse_patch(patch)


def test_an_edit_is_the_changed_lines_widened_until_unique():
    lines = LIB.split("\n")
    # `return x + 2` is in both functions: the edit takes the line above along
    old, new = unique_edit(lines, Hunk(1, ("    return x + 2",), ("    return x * 2",)))
    assert (old, new) == ("def double(x):\n    return x + 2", "def double(x):\n    return x * 2")
    assert LIB.count(old) == 1
    # an insertion anchors on a neighbouring line, the one above first
    assert unique_edit(lines, Hunk(5, (), ("    x = abs(x)",))) == (
        "def triple(x):",
        "def triple(x):\n    x = abs(x)",
    )
    # indentation is cut off the front
    body = ["def f(a):", "    b = a", "    return b"]
    assert unique_edit(body, Hunk(2, (), ("    c = b",))) == ("b = a", "b = a\n    c = b")
    with pytest.raises(ValueError, match="does not hold"):
        unique_edit(lines, Hunk(1, ("    return x",), ("    return 2 * x",)))


def test_the_check_imports_the_changed_modules():
    assert check_command(["lib.py"]) == 'python -B -c "import lib"'
    both = check_command(["pkg/__init__.py", "pkg/core.py", "README.md"])
    assert both == 'python -B -c "import pkg, pkg.core"'
    assert check_command(["src/pkg/a.py"]) == 'PYTHONPATH=src python -B -c "import pkg.a"'
    assert check_command(["my-scripts/run.py", "class.py", "data.txt"]) is None


def test_the_fix_reads_edits_checks_and_finishes(tmp_path):
    task = folder_task(tmp_path, {"lib.py": LIB}, LIB_PATCH)
    steps = script(task, guide.FIX)
    assert [step for step, _ in steps] == ["read", "edit", "check", "finish"]
    assert steps[0][1] == ToolCall("read_file", {"path": "lib.py"})
    edit = {"path": "lib.py", "old": "def double(x):\n    return x + 2"}
    assert steps[1][1] == ToolCall("edit_file", edit | {"new": "def double(x):\n    return x * 2"})
    assert steps[2][1] == ToolCall("run", {"command": 'python -B -c "import lib"'})
    # taking over after another policy's replies: no read
    assert GOLD_PATCH_GUIDE.steps(task, guide.RECOVER) == ("edit", "check", "finish")
    with pytest.raises(ValueError, match="no plan 'slip'"):
        GOLD_PATCH_GUIDE.steps(task, guide.SLIP)
    with pytest.raises(ValueError, match=r"cannot read lib\.py"):
        script(replace(task, repo=str(tmp_path / "elsewhere")), guide.FIX)


def test_a_long_file_is_read_around_its_changes_and_hunks_edit_in_turn(tmp_path):
    lines = [f"v{i} = {i}" for i in range(1, 61)]  # v1 = 1 ... v60 = 60
    patch = (
        "--- a/m.py\n+++ b/m.py\n"
        "@@ -9,3 +9,3 @@\n v9 = 9\n-v10 = 10\n+v10 = 0\n v11 = 11\n"
        "@@ -39,3 +39,4 @@\n v39 = 39\n v40 = 40\n+v40b = 40\n v41 = 41\n"
    )
    task = folder_task(tmp_path, {"m.py": "\n".join(lines) + "\n"}, patch)
    (read, first, second, check, _) = [call for _, call in script(task, guide.FIX)]
    assert read == ToolCall("read_file", {"path": "m.py", "start": 2, "end": 49})
    assert first.arguments == {"path": "m.py", "old": "v10 = 10", "new": "v10 = 0"}
    # `v40 = 40` is unique: the insertion after it anchors there
    assert (second.arguments["old"], second.arguments["new"]) == ("v40 = 40", "v40 = 40\nv40b = 40")
    assert check.arguments == {"command": 'python -B -c "import m"'}


def test_a_created_file_is_written_whole(tmp_path):
    new = "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n"
    task = folder_task(tmp_path, {"lib.py": LIB}, new + "@@ -0,0 +1,2 @@\n+a = 1\n+b = 2\n")
    (write, check, _) = [call for _, call in script(task, guide.FIX)]
    assert write == ToolCall("write_file", {"path": "n.py", "content": "a = 1\nb = 2\n"})
    assert check.arguments == {"command": 'python -B -c "import n"'}


def reply(policy, messages: list[Message], **sampling) -> ToolCall:
    ids = encode_chat(TOKENIZER, messages)
    completion = asyncio.run(policy.generate(ids, SamplingParams(**sampling)))
    (call,) = parse_reply(TOKENIZER.decode(completion.token_ids)).tool_calls
    return call


def test_the_guide_replies_from_its_context_and_finishes_after_a_refusal(tmp_path):
    task = folder_task(tmp_path, {"lib.py": LIB}, LIB_PATCH)
    wrapped = HarnessSection(task_template="Issue:\n{problem_statement}\nFix it.")
    policy = GOLD_PATCH_GUIDE.policy([task], guide.FIX, TOKENIZER)
    prompt = task_prompt(task, wrapped)  # the statement inside a template: still found
    assert reply(policy, prompt).name == "read_file"
    read = Message("assistant", "", [ToolCall("read_file", {"path": "lib.py"})])
    shown = Message("tool", "1: def double(x):\n2:     return x + 2")
    assert reply(policy, [*prompt, read, shown]).name == "edit_file"
    edit = Message("assistant", "", [reply(policy, [*prompt, read, shown])])
    refused = Message("tool", "error: edit_file: 'old' text not found in lib.py")
    assert reply(policy, [*prompt, read, shown, edit, refused]).name == "finish"
    assert policy.problems[task.instance_id] == [f"edit got {refused.content!r}"]
    # a reply over the token budget is a problem too
    fresh = GOLD_PATCH_GUIDE.policy([task], guide.FIX, TOKENIZER)
    ids = encode_chat(TOKENIZER, [*prompt, read, shown])
    cut = asyncio.run(fresh.generate(ids, SamplingParams(max_tokens=8)))
    assert cut.finish_reason == "length" and len(cut.token_ids) == 8
    assert fresh.problems[task.instance_id][0].endswith("exceeds the budget")
    other = replace(task, problem_statement="Something else is broken.")
    with pytest.raises(LookupError, match="no problem of the guide's tasks"):
        reply(policy, task_prompt(other, HARNESS))


def test_the_registry_hands_out_each_tasks_guide(tmp_path, monkeypatch):
    micro = get_task("micro-train-0007")
    assert guide_for(micro) is guide_for(get_task("product-train-0000")) is MICRO_GUIDE
    folder = folder_task(tmp_path, {"lib.py": LIB}, LIB_PATCH)
    assert guide_for(folder) is GOLD_PATCH_GUIDE
    assert guide_for(replace(folder, patch="")) is None
    # a suite registered without a guide of its own: its tasks' gold patches guide them
    monkeypatch.setitem(suites._SUITES, "mine", Suite("mine", lambda: [], lambda t, d: None))
    assert guide_for(replace(folder, suite="mine")) is GOLD_PATCH_GUIDE


def test_the_micro_guide_is_the_scripted_expert():
    task = get_task("micro-train-0007")
    assert MICRO_GUIDE.steps(task, guide.RECOVER) == ("edit", "check", "finish")
    assert MICRO_GUIDE.steps(task, "slip") == PLANS["slip"]
    with pytest.raises(ValueError, match="no plan 'recovery'"):
        MICRO_GUIDE.steps(task, "recovery")
    policy = MICRO_GUIDE.policy([task], guide.RECOVER, TOKENIZER, after=2)
    assert isinstance(policy, Expert) and (policy.plan, policy.after) == (PLANS["fix"][1:], 2)
    # only the micro expert slips
    slipping = guide.slip_opening(MICRO_GUIDE, task, TOKENIZER, policy)
    assert (slipping.first.plan, slipping.turns) == (PLANS["slip"], 2)
    with pytest.raises(ValueError, match="no plan 'slip'"):
        guide.slip_opening(GOLD_PATCH_GUIDE, task, TOKENIZER, policy)
