"""Expert demonstrations through the rollout worker: all kept, pinned to the tokens the
harness recorded before the expert moved here, valid tool calls, dropped with a reason
when wrong, and cached."""

import hashlib
import json
import re
from dataclasses import replace

import pytest
import torch

from fleetrl.config import HarnessSection, RolloutSection
from fleetrl.envs.micro.expert import PLANS
from fleetrl.envs.tasks.suites import get_task, load_tasks
from fleetrl.model.chat import Message, encode_chat, parse_reply
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.rollout import demos as demos_module
from fleetrl.rollout.demos import generate_demos, load_or_generate_demos
from fleetrl.types import Demo, Task

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()
HARNESS, ROLLOUT = HarnessSection(), RolloutSection()
# sha256 of [task_id, plan, token_ids, loss_mask] of the demos of the first three sample
# tasks with one copy each, as generated before the expert ran through the rollout worker.
# A change of the harness, tools, chat format or expert that changes a token changes it.
DEMOS_DIGEST = "7903bcd7b621fe6518f6259bc071b81e727c66a9643a603cbea8909c39c529f1"


def sample_tasks(n: int) -> list[Task]:
    """n training tasks covering every bug kind (first task of each kind, then the rest)."""
    tasks = load_tasks(suite="micro", split="train")
    firsts: dict[str, Task] = {}
    for task in tasks:
        firsts.setdefault(task.kind, task)
    rest = [task for task in tasks if task not in firsts.values()]
    return [*firsts.values(), *rest][:n]


def digest(demos: list[Demo]) -> str:
    rows = [[d.task_id, d.plan, d.token_ids, d.loss_mask] for d in demos]
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


@pytest.fixture(scope="module")
def generated():
    return generate_demos(
        sample_tasks(4), TOKENIZER, HARNESS, ROLLOUT, list(PLANS), copies=2, progress=False
    )


def test_generated_demos_are_kept_with_every_plan(generated):
    demos, stats = generated
    # The one drop: micro-train-0000's fix inserts a line, so it has no wrong line to retry.
    dropped = {"micro-train-0000/retry": "mazlq.py: no wrong way to change an insertion"}
    assert (stats.episodes, stats.kept, stats.dropped) == (
        4 * 5 + 4 * 2,
        4 * 5 + 4 * 2 - 1,
        dropped,
    )
    assert stats.graded == 4 * 5
    assert {d.plan for d in demos} == set(PLANS)
    assert [d.task_id for d in demos[:4]] == ["micro-train-0000"] * 4  # task order, then copies
    copies = [d for d in demos if d.task_id.count("-") == 3]  # micro-train-0000-<name>
    assert len(copies) == 8 and len({d.task_id for d in copies}) == 8
    assert 250 < stats.mean_tokens < HARNESS.max_context
    assert stats.mean_reply_tokens == sum(sum(d.loss_mask) for d in demos) / len(demos)


def test_demos_are_the_tokens_pinned_before_the_move():
    plans = ["fix", "look_first", "reproduce"]  # the plans there were then
    demos, stats = generate_demos(sample_tasks(3), TOKENIZER, HARNESS, ROLLOUT, plans, copies=1)
    assert stats.kept == 12
    assert digest(demos) == DEMOS_DIGEST


def test_a_slip_is_refused_then_fixed_and_only_the_retry_is_learned(generated):
    demos, _ = generated
    for demo in (d for d in demos if d.plan == "slip"):
        pieces = runs(demo)
        learned = TOKENIZER.decode([t for masked, ids in pieces if masked for t in ids])
        unlearned = TOKENIZER.decode([t for masked, ids in pieces if not masked for t in ids])
        slip = re.search(r'"old": "(.*?)", "new"', unlearned)[1]
        (retry,) = re.findall(r'"name": "edit_file", "arguments": .*?"old": "(.*?)"', learned)
        assert slip != retry and "text not found" in unlearned
        assert "the closest lines in the file:" in unlearned


def test_a_wrong_fix_is_seen_to_fail_then_edited_into_the_fix_and_only_that_is_learned(
    generated,
):
    demos, _ = generated
    retried = [d for d in demos if d.plan == "retry"]
    assert len(retried) == 4  # three originals (graded: reward 1) and one copy
    for demo in retried:
        pieces = runs(demo)
        learned = TOKENIZER.decode([t for masked, ids in pieces if masked for t in ids])
        unlearned = TOKENIZER.decode([t for masked, ids in pieces if not masked for t in ids])
        wrong = re.search(r'"old": "(.*?)", "new": "(.*?)"', unlearned)
        (fix,) = re.findall(r'"name": "edit_file", "arguments": .*?"old": "(.*?)"', learned)
        assert wrong[2] in fix  # the second edit starts from the line the first one wrote
        first, second = re.findall(r"exit code: \d+\n(.*?)\n</tool_response>", unlearned, re.S)
        assert first != second  # the run after the wrong fix shows another value


def test_a_wrong_fix_is_dropped_with_its_reason():
    task = get_task("micro-train-0007")  # nkims: `xut = 1` should be `xut = 0`
    wrong = replace(task, patch=task.patch.replace("+    xut = 0", "+    xut = 2"))
    demos, stats = generate_demos([wrong], TOKENIZER, HARNESS, ROLLOUT, plans=["fix"])
    assert demos == [] and list(stats.dropped) == ["micro-train-0007/fix"]
    reason = stats.dropped["micro-train-0007/fix"]
    assert reason == "check printed 'exit code: 0\\n206', expected 'exit code: 0\\n44'"


def test_tasks_the_expert_cannot_tell_apart_are_dropped_not_run():
    task = get_task("micro-train-0007")
    twin = replace(task, instance_id="micro-train-0007-twin")
    demos, stats = generate_demos([task, twin], TOKENIZER, HARNESS, ROLLOUT, plans=["fix"])
    assert [d.task_id for d in demos] == [task.instance_id]
    assert stats.dropped == {
        "micro-train-0007-twin/fix": "same problem statement as micro-train-0007/fix"
    }


SHOWN = re.compile(
    r"<tool_response>\n(.*?)\n</tool_response>|assistant\n(<tool_call>.*?</tool_call>)<\|im_end\|>",
    re.S,
)


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
    tasks = {task.instance_id: task for task in load_tasks(suite="micro", split="train")}
    for demo in demos:
        pieces = runs(demo)
        assert [masked for masked, _ in pieces][:2] == [0, 1] and pieces[-1][0] == 1
        statement = tasks[demo.task_id[:16]].problem_statement  # a copy: its original's
        if len(demo.task_id) > 16:  # micro-train-0000-<new name>
            statement = f"`{demo.task_id[17:]}{statement[statement.index('(') :]}"
        conversation = [
            Message("system", HARNESS.system_prompt),
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
            else:  # tool results, and any expert reply not to learn from (a slip)
                for result, unlearned in SHOWN.findall(text):
                    if unlearned:
                        (slip,) = parse_reply(unlearned).tool_calls
                        names.append(slip.name)
                        conversation.append(Message("assistant", "", [slip]))
                    else:
                        conversation.append(Message("tool", result))
        steps = {"list": "list_dir", "read": "read_file", "edit": "edit_file", "check": "run"}
        steps["slip"] = steps["wrong"] = "edit_file"
        assert names == [steps.get(step, step) for step in PLANS[demo.plan]]
        rendered = encode_chat(TOKENIZER, conversation, add_generation_prompt=False)
        assert rendered == demo.token_ids + TOKENIZER.encode("\n")


def test_demos_are_cached(tmp_path, monkeypatch):
    tasks = sample_tasks(1)
    args = (tasks, TOKENIZER, HARNESS, ROLLOUT)
    first, stats = load_or_generate_demos(*args, plans=["fix"], cache=tmp_path)
    assert stats.kept == 1 and len(list(tmp_path.iterdir())) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("demonstrations were generated again")

    monkeypatch.setattr(demos_module, "generate_demos", refuse)
    again, _ = load_or_generate_demos(*args, plans=["fix"], cache=tmp_path)
    assert again == first
