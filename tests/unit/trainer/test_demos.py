"""Expert demonstrations: they fix their tasks (real sandboxes, real verifier), and their
tokens are exactly the harness's rendering of a valid tool-calling conversation."""

import asyncio
import random
import re
from dataclasses import replace

import pytest
import torch

from fleetrl.envs.harness import micro_harness, run_episode
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.tasks import ensure_repo, get_task, load_tasks
from fleetrl.envs.verifier import sandbox_changes, verify
from fleetrl.model import Message, bundled_tokenizer, encode_chat, parse_reply
from fleetrl.trainer import demos as demos_module
from fleetrl.trainer.demos import (
    PLANS,
    Expert,
    check_command,
    demonstrate_task,
    generate_demos,
    gold_change,
    load_or_generate_demos,
    parse_example,
    rename,
    renamed_copy,
    shortest_edit,
)
from fleetrl.types import Task

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()


def sample_tasks(n: int):
    """n training tasks covering every bug kind (first task of each kind, then the rest)."""
    tasks = load_tasks(suite="micro", split="train")
    firsts: dict[str, Task] = {}
    for task in tasks:
        firsts.setdefault(task.kind, task)
    rest = [task for task in tasks if task not in firsts.values()]
    return [*firsts.values(), *rest][:n]


@pytest.fixture(scope="module")
def generated():
    return generate_demos(sample_tasks(4), TOKENIZER, copies=2, progress=False)


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


def test_expert_demonstrations_fix_their_tasks_under_the_real_verifier():
    """Ten tasks of every bug kind: the expert's episode, graded here independently."""
    harness = micro_harness()

    async def graded(task):
        repo = ensure_repo(task)
        expert = Expert(task, "fix", TOKENIZER)
        with open_sandbox(repo) as sandbox:
            episode = await run_episode(expert, TOKENIZER, sandbox, task, harness)
            changes = sandbox_changes(sandbox, repo)
        calls = [(r.name, r.arguments) for r in episode.tool_log]
        return expert, episode, verify(task, changes, calls)

    tasks = sample_tasks(10)
    assert len({task.kind for task in tasks}) == 8
    for task in tasks:
        expert, episode, result = asyncio.run(graded(task))
        assert expert.problems == [], task.instance_id
        assert [r.name for r in episode.tool_log] == ["read_file", "edit_file", "run", "finish"]
        assert episode.tool_log[1].output.startswith("edited ")
        assert episode.tool_log[2].output.startswith("exit code: 0\n")
        assert result.reward == 1.0, (task.instance_id, result.tests, result.flags)


def test_generated_demos_are_all_kept_with_every_plan(generated):
    demos, stats = generated
    assert (stats.episodes, stats.kept, stats.dropped) == (4 * 3 + 4 * 2, 4 * 3 + 4 * 2, {})
    assert stats.graded == 4 * 3
    assert {d.plan for d in demos} == set(PLANS)
    copies = [d for d in demos if d.task_id.count("-") == 3]  # micro-train-0000-<name>
    assert len(copies) == 8 and len({d.task_id for d in copies}) == 8
    assert 250 < stats.mean_tokens < micro_harness().max_context
    assert stats.mean_reply_tokens == sum(sum(d.loss_mask) for d in demos) / len(demos)


def test_rename_touches_bound_names_only():
    source = "def f(a):\n    s = 'a'\n    a.a(len(s))  # a\n    return a\n"
    renamed = rename(source, {"f": "gh", "a": "b", "s": "t"})
    assert renamed == "def gh(b):\n    t = 'a'\n    b.a(len(t))  # a\n    return b\n"


def test_renamed_copies_keep_their_meaning_under_the_real_verifier(tmp_path):
    """A copy of each of three templates: fixed by the expert, graded with renamed tests."""

    def name(task):
        return task.problem_statement[1 : task.problem_statement.index("(")]

    for i, task in enumerate(sample_tasks(3)):
        copy = renamed_copy(task, random.Random(i), tmp_path / str(i))
        assert copy.test_files == [f"test_{name(copy)}.py"]
        assert name(task) not in copy.patch + copy.test_patch + copy.problem_statement
        assert copy.problem_statement.split("(", 1)[1] == task.problem_statement.split("(", 1)[1]
        outcomes = asyncio.run(demonstrate_task(copy, ["fix"], TOKENIZER, micro_harness()))
        assert outcomes[0][1] == "" and outcomes[0][0] is not None


def test_a_wrong_fix_is_dropped_with_its_reason():
    task = get_task("micro-train-0007")  # nkims: `xut = 1` should be `xut = 0`
    wrong = replace(task, patch=task.patch.replace("+    xut = 0", "+    xut = 2"))
    outcomes = asyncio.run(demonstrate_task(wrong, ["fix"], TOKENIZER, micro_harness()))
    ((demo, reason),) = outcomes
    assert demo is None and "check printed 'exit code: 0\\n" in reason


def runs(demo):
    """The demo cut into (masked?, ids) runs: expert replies and harness text in turn."""
    out = []
    for token, masked in zip(demo.token_ids, demo.loss_mask, strict=True):
        if out and out[-1][0] == masked:
            out[-1][1].append(token)
        else:
            out.append((masked, [token]))
    return out


def test_demo_tokens_are_valid_tool_calls_and_the_harness_rendering(generated):
    demos, _ = generated
    harness = micro_harness()
    tasks = {task.instance_id: task for task in load_tasks(suite="micro", split="train")}
    for demo in demos:
        pieces = runs(demo)
        assert [masked for masked, _ in pieces][:2] == [0, 1] and pieces[-1][0] == 1
        statement = tasks[demo.task_id[:16]].problem_statement  # a copy: its original's
        if len(demo.task_id) > 16:  # micro-train-0000-<new name>
            statement = f"`{demo.task_id[17:]}{statement[statement.index('(') :]}"
        conversation = [
            Message("system", harness.system_prompt),
            Message("user", statement),
        ]
        names = []
        for masked, ids in pieces[1:]:
            text = TOKENIZER.decode(ids)
            if masked:
                assert ids[-1] == TOKENIZER.eos_id
                reply = parse_reply(text)
                assert reply.errors == [] and len(reply.tool_calls) == 1 and not reply.content
                names.append(reply.tool_calls[0].name)
                conversation.append(Message("assistant", "", reply.tool_calls))
            else:
                (result,) = re.findall(r"<tool_response>\n(.*)\n</tool_response>", text, re.S)
                conversation.append(Message("tool", result))
        steps = {"list": "list_dir", "read": "read_file", "edit": "edit_file", "check": "run"}
        assert names == [steps.get(step, step) for step in PLANS[demo.plan]]
        rendered = encode_chat(TOKENIZER, conversation, add_generation_prompt=False)
        assert rendered == demo.token_ids + TOKENIZER.encode("\n")


def test_demos_are_cached(tmp_path, monkeypatch, generated):
    tasks = sample_tasks(1)
    first, stats = load_or_generate_demos(tasks, TOKENIZER, plans=["fix"], cache=tmp_path)
    assert stats.kept == 1 and len(list(tmp_path.iterdir())) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("demonstrations were generated again")

    monkeypatch.setattr(demos_module, "generate_demos", refuse)
    again, _ = load_or_generate_demos(tasks, TOKENIZER, plans=["fix"], cache=tmp_path)
    assert again == first
