"""Recovery guidance's token bookkeeping: which positions are replies, and masking the
replayed ones out of the loss."""

from fleetrl.rollout.guidance import mask_replies, recovery_room, replies
from fleetrl.rollout.worker import _stamp_guided
from fleetrl.types import Segment, Trajectory


def segment() -> Segment:
    mask = [0, 0, 1, 1, 0, 1, 0, 0, 1, 1]  # prompt, reply, result, reply, result, reply
    return Segment(
        token_ids=list(range(10)),
        loss_mask=mask,
        logprobs=[-0.5 if m else 0.0 for m in mask],
        versions=[4 if m else -1 for m in mask],
    )


def test_replies_are_the_runs_of_sampled_tokens_the_last_one_included():
    assert replies(segment()) == [(2, 4), (5, 6), (8, 10)]


def test_masking_the_replayed_replies_leaves_the_rest_to_learn():
    s = segment()
    mask_replies(s, 2)
    assert s.loss_mask == [0] * 8 + [1, 1]
    assert s.logprobs == [0.0] * 8 + [-0.5, -0.5]
    assert s.versions == [-1] * 8 + [4, 4]


def test_a_sample_leaves_the_guide_the_turns_it_needs():
    assert recovery_room(6, 3) == 3


def test_a_guided_episode_of_several_windows_is_guided_in_each():
    """A guide's self-summarising episode: every window is learned off-policy, stamped with
    the group's newest version; replayed replies come out of the first window only."""
    windows = [segment(), segment()]
    episode = Trajectory("t", windows, 1.0, "finish", 5, 4, 0, 1.0)
    _stamp_guided(episode, 1, version=7)
    assert all(s.guided for s in episode.segments)
    assert episode.segments[0].loss_mask == [0] * 5 + [1, 0, 0, 1, 1]
    assert episode.segments[1].loss_mask == segment().loss_mask
    assert episode.segments[1].versions == [7 if m else -1 for m in segment().loss_mask]
