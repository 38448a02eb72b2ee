"""Recovery guidance: the task's guide finishes a failed sample from the edit the tool refused.

    group failed whole ─▶ a sample with an edit refused before any was applied
                       ─▶ its replies up to the refusal, token for token (`Recorded`)
                       ─▶ the guide (plan RECOVER): the correct edit, a check, finish
                       ─▶ verified ─▶ the replayed replies masked out of the loss

A guided group (`rollout.guide_failed_groups`) otherwise gets the guide's episode from
scratch, which teaches the fix but never what to do after a mistake; the policy sees a
refused edit only in its own samples, and those fail. Continuing one of them puts the
recovery into the context the policy itself produced: its own reading of the file, its
own mis-copied `old`, the tool's refusal. Its replies are replayed in a fresh sandbox (the
tools give the same results) and masked, so the update teaches the retry, not the slip.

Not covered: a sample that applied a wrong edit before (the gold patch no longer fits the
file), several segments (self-summarisation), recovery from anything but a refused edit.
"""

from __future__ import annotations

from fleetrl.model.chat import tool_results
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import Segment, Trajectory

EDIT_ERROR = "error: edit_file"  # how a refused edit's result begins
EDITED = "edited "  # and an applied one's


def replies(segment: Segment) -> list[tuple[int, int]]:
    """[start, end) of each reply the policy sent: the runs of loss_mask 1."""
    runs, start = [], None
    for i, m in enumerate([*segment.loss_mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((start, i))
            start = None
    return runs


def refused_prefix(
    trajectory: Trajectory, tokenizer: Tokenizer, max_replies: int
) -> list[list[int]] | None:
    """The ids of `trajectory`'s replies up to and including the first one whose edit the
    tool refused, or None: no refusal within `max_replies` replies, an edit applied before
    it (the file no longer holds the bug as read), or more than one segment."""
    if len(trajectory.segments) != 1:
        return None
    (segment,) = trajectory.segments
    spans = replies(segment)
    for n, (_, end) in enumerate(spans[:max_replies]):
        after = spans[n + 1][0] if n + 1 < len(spans) else len(segment.token_ids)
        results = tool_results(tokenizer.decode(segment.token_ids[end:after]))
        if any(r.startswith(EDIT_ERROR) for r in results):
            return [segment.token_ids[a:b] for a, b in spans[: n + 1]]
        if any(r.startswith(EDITED) for r in results):
            return None
    return None


def recovery_room(max_turns: int, guide_turns: int) -> int:
    """Replies a sample may have sent, refusal included, and leave the guide the
    `guide_turns` replies it needs to finish."""
    return max_turns - guide_turns


def mask_replies(segment: Segment, n: int) -> None:
    """Take the segment's first `n` replies out of the loss (the replayed ones)."""
    for start, end in replies(segment)[:n]:
        segment.loss_mask[start:end] = [0] * (end - start)
        segment.logprobs[start:end] = [0.0] * (end - start)
        segment.versions[start:end] = [-1] * (end - start)
