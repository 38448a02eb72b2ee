"""The scripted expert: it reads gold patches and statements, edits minimally, and finds
its task from the prompt (its episodes under the real verifier: tests/env/envs/micro)."""

import ast
import asyncio
import random
from dataclasses import replace

import pytest

from fleetrl.config import HarnessSection
from fleetrl.envs.harness.loop import task_prompt
from fleetrl.envs.micro.expert import (
    Expert,
    check_command,
    parse_example,
    shortest_edit,
    slipped,
    wrong_fix,
)
from fleetrl.envs.micro.gold import gold_change
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.model.chat import encode_chat
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.types import SamplingParams

TOKENIZER = bundled_tokenizer()
HARNESS = HarnessSection()


def test_gold_change_single_line_and_insertion():
    swap = load_tasks(suite="micro", split="train")[1].patch  # eczv: divmod arguments swapped
    change = gold_change(swap)
    assert (change.path, change.start, change.end) == ("eczv.py", 1, 2)
    assert change.old == ("    tpo, qg = divmod(gd, t)",)
    assert change.new == ("    tpo, qg = divmod(t, gd)",)
    dropped = gold_change(load_tasks(suite="micro", split="train")[0].patch)
    assert (dropped.start, dropped.end, dropped.old) == (4, 4, ())
    assert dropped.new == ("        tnt += bwv",)


def test_shortest_edit_strips_indentation_and_widens_until_unique():
    lines = ["def f(a):", "    x = 1", "    if a:", "        x = 1", "    return x"]
    change = replace(gold_change(load_tasks(suite="micro", split="train")[1].patch), path="f.py")
    change = replace(change, start=3, end=4, old=("        x = 1",), new=("        x = 2",))
    old, new = shortest_edit(lines, change)
    assert (old, new) == ("if a:\n        x = 1", "if a:\n        x = 2")
    assert "\n".join(lines).count(old) == 1
    insert = replace(change, start=2, end=2, old=(), new=("    a += 1",))
    # The line above ("x = 1") occurs twice, so the insertion anchors on the line below.
    assert shortest_edit(lines, insert) == ("if a:", "a += 1\n    if a:")
    with pytest.raises(ValueError, match="does not hold"):
        shortest_edit(["def f(a):", "    return a"], change)


def test_a_wrong_fix_changes_the_buggy_line_into_neither_the_bug_nor_the_fix():
    lines = ["def f(xs):", "    n = 0", "    for v in xs:", "        n -= v", "    return n"]
    change = replace(gold_change(load_tasks(suite="micro", split="train")[1].patch), path="f.py")
    change = replace(change, start=3, end=4, old=("        n -= v",), new=("        n += v",))
    wrong = {wrong_fix(lines, change, random.Random(seed)) for seed in range(20)}
    assert len(wrong) > 1 and not wrong & {change.old, change.new}
    for (line,) in wrong:  # one line, still parsing, the rest of the file untouched
        ast.parse("\n".join([*lines[:3], line, *lines[4:]]))
    # `return False` -> `return True` has no mutation but the bug itself, and no name to swap.
    truth = ["def g(a):", "    return False"]
    flip = replace(change, start=1, end=2, old=("    return False",), new=("    return True",))
    with pytest.raises(ValueError, match="no wrong way to change the buggy lines"):
        wrong_fix(truth, flip, random.Random(0))
    with pytest.raises(ValueError, match="an insertion"):
        wrong_fix(lines, replace(change, end=3, old=()), random.Random(0))


def test_example_and_check_command():
    example = parse_example("`nkims([4, 8])` should return 44, but it returns 125.", "nkims.py")
    assert (example.module, example.function, example.call) == ("nkims", "nkims", "nkims([4, 8])")
    assert example.expected == "44"
    raising = parse_example(
        "`wnrys([])` should return 'ab', but it raises ZeroDivisionError.", "w.py"
    )
    assert raising.expected == "ab"  # print() shows str
    assert check_command(raising) == 'python -B -c "from w import wnrys; print(wnrys([]))"'
    with pytest.raises(ValueError):
        parse_example("the tests fail", "x.py")


def test_the_expert_knows_its_tasks_by_their_statements():
    task, other = load_tasks(suite="micro", split="train")[:2]
    with pytest.raises(ValueError, match="same problem statement"):
        Expert([task, replace(other, problem_statement=task.problem_statement)], "fix", TOKENIZER)
    expert = Expert([task], "fix", TOKENIZER)
    prompt = encode_chat(TOKENIZER, task_prompt(other, HARNESS))
    with pytest.raises(LookupError, match="states no problem of the expert's tasks"):
        asyncio.run(expert.generate(prompt, SamplingParams()))
    prompt = encode_chat(TOKENIZER, task_prompt(task, HARNESS))
    first = asyncio.run(expert.generate(prompt, SamplingParams()))
    assert '"read_file"' in TOKENIZER.decode(first.token_ids)
    assert expert.problems == {task.instance_id: []}


def test_a_slip_mis_copies_one_token_and_is_never_in_the_file():
    text = "def f(a):\n    for j in range(3, a):\n        x = 'q'\n    return x"
    number = slipped("for j in range(3, a):", text, random.Random(0))
    assert number in ("for j in range(2, a):", "for j in range(4, a):")
    letter = slipped("x = 'q'", text, random.Random(0))
    assert letter.startswith("x = '") and letter != "x = 'q'" and len(letter) == len("x = 'q'")
    name = slipped("return x", "return x\nreturn y", random.Random(1))
    assert name not in "return x\nreturn y" and len(name) == len("return x")
    with pytest.raises(ValueError, match="no mis-copy"):
        slipped("", "anything", random.Random(0))
