"""Self-summarisation and truncation in the agent loop (`run_episode` with
`harness.summarise_at` / `harness.truncate`), driven by a scripted token policy over an
in-memory workspace: no process starts, so the loop's bookkeeping is checked exactly.
The long suite's expert under a real sandbox and the verifier is in tests/env."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

import pytest

from fleetrl.config import SUMMARISE_AT, HarnessSection
from fleetrl.envs.harness.loop import run_episode, task_prompt
from fleetrl.model.chat import (
    GENERATION_PROMPT,
    IM_END,
    IM_START,
    Message,
    ToolCall,
    encode_chat,
    format_reply,
)
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.types import Completion, SamplingParams, Segment, Task, Trajectory
from tests.unit.envs.harness.memory_sandbox import MemorySandbox

TOKENIZER = bundled_tokenizer()
REPLY = 32  # max_reply_tokens of every harness here: a scripted reply is ~20 tokens
HARNESS = HarnessSection(
    system_prompt="You fix bugs.",
    describe_tools=False,
    max_turns=30,
    max_tokens=20000,
    max_reply_tokens=REPLY,
    max_context=1024,
    max_output_chars=100_000,
)
SUMMARY = "notes: the bug is in c.py, line 3; X = 42. Next: edit c.py."
TURN_LOGPROB, SUMMARY_LOGPROB = -0.5, -0.25
TURN_VERSION, SUMMARY_VERSION = 3, 7


def source(marker: str, lines: int) -> str:
    """A module of `lines` small functions whose text holds `marker` once (a word no
    other file, prompt or summary has), so a context can be searched for it."""
    body = [f"# {marker}"]
    body += [f"def f{i}(x):\n    return x + {i}" for i in range(lines)]
    return "\n".join(body) + "\n"


def read(path: str) -> Message:
    return Message("assistant", "", [ToolCall("read_file", {"path": path})])


FINISH = Message("assistant", "", [ToolCall("finish", {})])


class ScriptedPolicy:
    """Plays `replies` in order; when the context ends on the summary request it writes
    SUMMARY instead. Records every prompt, whether it asked for a summary, the params
    and the completion."""

    def __init__(self, replies: list[Message], summary_prompt: str) -> None:
        self.replies = list(replies)
        self.request = f"{IM_START}user\n{summary_prompt}{IM_END}\n{GENERATION_PROMPT}"
        self.calls: list[tuple[list[int], bool, SamplingParams, Completion]] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Completion:
        asked = TOKENIZER.decode(prompt_ids).endswith(self.request)
        text = SUMMARY if asked else format_reply(self.replies.pop(0))
        ids = TOKENIZER.encode(text + IM_END)[: params.max_tokens]
        n = len(ids)
        completion = Completion(
            prompt_ids=list(prompt_ids),
            token_ids=ids,
            logprobs=[SUMMARY_LOGPROB if asked else TURN_LOGPROB] * n,
            versions=[SUMMARY_VERSION if asked else TURN_VERSION] * n,
            finish_reason="stop" if ids[-1] == TOKENIZER.eos_id else "length",
        )
        self.calls.append((list(prompt_ids), asked, params, completion))
        return completion

    @property
    def kinds(self) -> list[str]:
        return ["summary" if asked else "turn" for _, asked, _, _ in self.calls]


def make_task(suite: str = "micro") -> Task:
    return Task(
        instance_id="mem-1",
        repo="/nonexistent",
        base_commit="0" * 40,
        problem_statement="`f3(1)` in c.py should return 4, but it returns 5.",
        patch="",
        test_patch="",
        FAIL_TO_PASS=["test_c.py::test_f3"],
        PASS_TO_PASS=[],
        suite=suite,
    )


def episode(
    files: Mapping[str, str],
    replies: list[Message],
    harness: HarnessSection,
    suite: str = "micro",
) -> tuple[Trajectory, ScriptedPolicy]:
    policy = ScriptedPolicy(replies, harness.summary_prompt)
    sandbox = MemorySandbox(files)
    result = asyncio.run(
        run_episode(policy, TOKENIZER, sandbox, make_task(suite), harness, SamplingParams())
    )
    return result.trajectory, policy


def opening(harness: HarnessSection, suite: str = "micro") -> list[int]:
    return encode_chat(TOKENIZER, task_prompt(make_task(suite), harness), None)


def resumed(harness: HarnessSection, summary: str = SUMMARY) -> list[int]:
    resume = Message("user", harness.resume_template.format(summary=summary))
    return encode_chat(TOKENIZER, [*task_prompt(make_task(), harness), resume], None)


def check_segments(trajectory: Trajectory, policy: ScriptedPolicy) -> None:
    """Per segment: aligned annotations, and every prompt the policy was given in it is a
    prefix of its final ids, its completion right after. A segment closes after a summary
    (or when truncation reopens it: a prompt that is no extension of the last)."""
    for seg in trajectory.segments:
        n = len(seg.token_ids)
        assert len(seg.loss_mask) == len(seg.logprobs) == len(seg.versions) == n
    index = 0
    for number, (prompt, asked, _, completion) in enumerate(policy.calls):
        seg = trajectory.segments[index]
        if seg.token_ids[: len(prompt)] != prompt:
            index += 1  # truncation opened the next segment
            seg = trajectory.segments[index]
        assert seg.token_ids[: len(prompt)] == prompt, f"call {number}"
        end = len(prompt) + len(completion.token_ids)
        assert seg.token_ids[len(prompt) : end] == completion.token_ids, f"call {number}"
        assert seg.loss_mask[len(prompt) : end] == [1] * len(completion.token_ids)
        assert seg.logprobs[len(prompt) : end] == completion.logprobs
        assert seg.versions[len(prompt) : end] == completion.versions
        if asked:
            assert end == len(seg.token_ids), "a summary closes its segment"
            index += 1
    assert index in (len(trajectory.segments) - 1, len(trajectory.segments))


def learned(seg: Segment) -> int:
    return sum(seg.loss_mask)


# Five modules of ~245 tokens as read_file shows them (a turn that reads one adds ~280).
MEDIUM = {f"{c}.py": source(f"MARK{c.upper()}", 12) for c in "abcde"}
BIG = {"big.py": source("BIGFILE", 30)}  # ~610 tokens: one read and a summary fill 1024
HUGE = {"huge.py": source("MARKHUGE", 50)}  # ~1010 tokens: alone it overflows 1024


def marks(ids: list[int]) -> set[str]:
    text = TOKENIZER.decode(ids)
    return {m for m in ("MARKA", "MARKB", "MARKC", "MARKD", "MARKE") if m in text}


def prompt_lengths(replies: list[Message]) -> list[int]:
    """The length of each prompt of an episode with room to spare and no summaries."""
    roomy = HARNESS.model_copy(update={"max_context": 4096, "summarise_at": 0.0})
    trajectory, policy = episode(MEDIUM, replies, roomy)
    assert trajectory.finish_reason == "finish" and len(trajectory.segments) == 1
    return [len(prompt) for prompt, _, _, _ in policy.calls]


def test_the_summary_is_asked_for_exactly_when_the_next_turn_would_pass_the_limit():
    replies = [read("a.py"), read("b.py"), read("c.py"), read("d.py"), FINISH]
    lengths = prompt_lengths(replies)
    # The third turn's prompt plus a whole reply is exactly the limit: it fits, and
    # the fourth would not. One token less and the summary comes a turn earlier.
    limit = lengths[2] + REPLY
    at = HARNESS.model_copy(update={"max_context": 4096, "summarise_at": limit / 4096})
    assert at.summary_limit("micro") == limit
    trajectory, policy = episode(MEDIUM, list(replies), at)
    assert policy.kinds == ["turn", "turn", "turn", "summary", "turn", "turn"]
    assert trajectory.finish_reason == "finish"
    assert trajectory.summaries == [SUMMARY]
    assert len(trajectory.segments) == 2
    for prompt, asked, _, _ in policy.calls:  # every turn had a whole reply's room
        assert asked or len(prompt) + REPLY <= limit
    before = at.model_copy(update={"summarise_at": (limit - 1) / 4096})
    assert before.summary_limit("micro") == limit - 1
    _, earlier = episode(MEDIUM, list(replies), before)
    assert earlier.kinds[:3] == ["turn", "turn", "summary"]


def test_the_summary_is_sampled_closes_the_window_and_opens_the_next():
    replies = [read("a.py"), read("b.py"), read("c.py"), read("d.py"), FINISH]
    limit = prompt_lengths(replies)[2] + REPLY
    harness = HARNESS.model_copy(update={"max_context": 4096, "summarise_at": limit / 4096})
    trajectory, policy = episode(MEDIUM, replies, harness)
    first, second = trajectory.segments
    prompt, asked, params, summary = policy.calls[3]
    assert asked
    # Asked for after the third turn's tool results, in a user turn of its own, with its
    # own token budget; the policy saw the last result.
    context = TOKENIZER.decode(prompt)
    request = f"{IM_START}user\n{harness.summary_prompt}{IM_END}\n{GENERATION_PROMPT}"
    assert context.endswith(f"</tool_response>{IM_END}\n{request}")
    assert marks(prompt) == {"MARKA", "MARKB", "MARKC"}
    assert params.max_tokens == harness.max_summary_tokens
    assert params.stop_token_ids == [TOKENIZER.eos_id]
    # The summary's tokens end the first window, learned, with their behaviour logprobs.
    k = len(summary.token_ids)
    assert first.token_ids == prompt + summary.token_ids
    assert first.loss_mask[-k:] == [1] * k
    assert first.logprobs[-k:] == [SUMMARY_LOGPROB] * k
    assert first.versions[-k:] == [SUMMARY_VERSION] * k
    assert summary.token_ids[-1] == TOKENIZER.eos_id
    assert trajectory.summaries == [SUMMARY]
    # The next window: system + task + the resume turn holding the summary, and nothing
    # of the first window's reads, the last one included.
    resume = resumed(harness)
    assert policy.calls[4][0] == resume
    assert second.token_ids[: len(resume)] == resume
    assert second.loss_mask[: len(resume)] == [0] * len(resume)
    assert SUMMARY in TOKENIZER.decode(resume)
    assert marks(second.token_ids) == {"MARKD"}
    check_segments(trajectory, policy)


def test_every_prompt_is_a_prefix_of_its_own_segment_over_several_summaries():
    replies = [read("a.py"), read("b.py"), read("c.py"), read("d.py"), read("e.py"), FINISH]
    harness = HARNESS.model_copy(update={"summarise_at": 0.5, "max_segments": 4})
    trajectory, policy = episode(MEDIUM, replies, harness)
    assert trajectory.finish_reason == "finish"
    assert len(trajectory.summaries) == policy.kinds.count("summary") >= 2
    assert len(trajectory.segments) == len(trajectory.summaries) + 1
    check_segments(trajectory, policy)
    # The learned tokens are exactly what the policy sampled, summaries included.
    sampled = sum(len(completion.token_ids) for _, _, _, completion in policy.calls)
    assert sum(learned(seg) for seg in trajectory.segments) == sampled
    for seg in trajectory.segments:
        assert len(seg.token_ids) <= harness.max_context


@pytest.mark.parametrize("max_segments", [1, 2, 3])
def test_max_segments_caps_the_summaries_then_the_context_fills(max_segments):
    harness = HARNESS.model_copy(update={"summarise_at": 0.5, "max_segments": max_segments})
    trajectory, policy = episode(BIG, [read("big.py")] * 8, harness)
    assert trajectory.finish_reason == "context_full"
    assert len(trajectory.summaries) == max_segments - 1
    assert policy.kinds.count("summary") == max_segments - 1
    assert len(trajectory.segments) == max_segments
    check_segments(trajectory, policy)


def test_summarise_at_zero_is_off():
    harness = HARNESS.model_copy(update={"summarise_at": 0.0})
    assert harness.summary_limit("long") is None and harness.summary_limit("micro") is None
    trajectory, policy = episode(BIG, [read("big.py")] * 8, harness, suite="long")
    assert trajectory.finish_reason == "context_full"
    assert "summary" not in policy.kinds
    assert trajectory.summaries == [] and len(trajectory.segments) == 1
    check_segments(trajectory, policy)


def test_unset_summarise_at_is_the_suite_default_on_for_long_off_for_micro():
    assert SUMMARISE_AT == {"long": 0.8}
    harness = HARNESS.model_copy(update={"summarise_at": None})
    assert harness.summary_limit("long") == int(0.8 * 1024)
    assert harness.summary_limit("micro") is None
    assert harness.model_copy(update={"summarise_at": 0.5}).summary_limit("micro") == 512
    replies = [read("a.py"), read("b.py"), read("c.py"), read("d.py"), FINISH]
    long, long_policy = episode(MEDIUM, list(replies), harness, suite="long")
    assert long.finish_reason == "finish"
    assert long.summaries == [SUMMARY] and len(long.segments) == 2
    check_segments(long, long_policy)
    micro, micro_policy = episode(MEDIUM, list(replies), harness, suite="micro")
    assert micro.finish_reason == "context_full"
    assert micro.summaries == [] and len(micro.segments) == 1
    assert "summary" not in micro_policy.kinds


def test_truncation_drops_the_oldest_turns_keeps_the_opening_and_goes_on():
    replies = [read("a.py"), read("b.py"), read("c.py"), read("d.py"), read("e.py"), FINISH]
    harness = HARNESS.model_copy(update={"summarise_at": 0.0, "truncate": True})
    trajectory, policy = episode(MEDIUM, list(replies), harness)
    assert trajectory.finish_reason == "finish"
    assert trajectory.summaries == [] and "summary" not in policy.kinds
    assert len(trajectory.segments) >= 2
    check_segments(trajectory, policy)
    start = opening(harness)
    first, second = trajectory.segments[:2]
    # The first window holds the reads up to the one that overflowed, not its result
    # (the policy never read it there).
    assert marks(first.token_ids) == {"MARKA", "MARKB", "MARKC"}
    reopened = next(p for p, _, _, _ in policy.calls if first.token_ids[: len(p)] != p)
    # The next opens on system + task, then the newest turns that fit, with the result
    # that did not fit before; the oldest turn is gone.
    assert reopened[: len(start)] == start
    assert "MARKA" not in marks(reopened) and {"MARKC", "MARKD"} <= marks(reopened)
    assert len(reopened) + REPLY <= harness.max_context
    dropped = len(policy.calls[1][0]) - len(start)  # the first turn: reply and results
    kept = first.token_ids[len(start) + dropped :]
    assert reopened[len(start) : len(start) + len(kept)] == kept
    # Replies carried over are context now, learned once (in the window that sampled them).
    assert second.loss_mask[: len(reopened)] == [0] * len(reopened)
    sampled = sum(len(completion.token_ids) for _, _, _, completion in policy.calls)
    assert sum(learned(seg) for seg in trajectory.segments) == sampled
    for seg in trajectory.segments:
        assert seg.token_ids[: len(start)] == start

    without = harness.model_copy(update={"truncate": False})
    ended, _ = episode(MEDIUM, list(replies), without)
    assert ended.finish_reason == "context_full" and len(ended.segments) == 1


def test_truncation_gives_way_to_summaries_and_to_a_result_that_fits_nowhere():
    replies = [read("a.py"), read("b.py"), read("c.py"), read("d.py"), read("e.py"), FINISH]
    both = HARNESS.model_copy(update={"summarise_at": 0.5, "truncate": True})
    trajectory, policy = episode(MEDIUM, list(replies), both)
    assert trajectory.summaries and trajectory.finish_reason == "finish"
    assert len(trajectory.segments) == policy.kinds.count("summary") + 1
    check_segments(trajectory, policy)
    for seg in trajectory.segments[1:]:  # every later window opens on a summary
        assert seg.token_ids[: len(resumed(both))] == resumed(both)
    # Summarisation on, its windows spent: truncation stays off, the context fills.
    capped = both.model_copy(update={"max_segments": 1})
    full, _ = episode(MEDIUM, list(replies), capped)
    assert full.finish_reason == "context_full" and len(full.segments) == 1
    truncating = HARNESS.model_copy(update={"summarise_at": 0.0, "truncate": True})
    huge, _ = episode(HUGE, [read("huge.py")] * 3, truncating)
    assert huge.finish_reason == "context_full" and len(huge.segments) == 1


def test_a_second_truncation_keeps_the_carried_turns_that_still_fit():
    replies = [read("a.py"), read("b.py"), read("c.py"), read("d.py"), read("e.py"), FINISH]
    harness = HARNESS.model_copy(update={"summarise_at": 0.0, "truncate": True})
    trajectory, _ = episode(MEDIUM, replies, harness)
    assert [sorted(marks(seg.token_ids)) for seg in trajectory.segments] == [
        ["MARKA", "MARKB", "MARKC"],
        ["MARKB", "MARKC", "MARKD"],
        ["MARKC", "MARKD", "MARKE"],  # opening + c + d + e fit in 1024 - REPLY
    ]


def test_results_that_overflow_the_window_still_get_a_summary():
    """The docstring's promise: with summarisation on, a full context is summarised, not
    the end. Here the second read (~610 tokens) lands on ~330 and passes 1024 by itself."""
    files = {**MEDIUM, **BIG}
    harness = HARNESS.model_copy(update={"summarise_at": 0.8})
    trajectory, policy = episode(files, [read("a.py"), read("big.py"), FINISH], harness)
    assert policy.kinds.count("summary") == 1
    assert trajectory.finish_reason == "finish"
