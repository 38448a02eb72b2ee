"""Calls mode's wire, alone: plain data round trips as fresh values of builtin types, what is
not plain never crosses, the framing is bounded, and the grader rebuilds what the worker
reports without trusting it. The two processes, for real: tests/env/envs/verifier/test_calls.py."""

import contextlib
import enum
import json
import math
import os
import threading
import time
from collections import Counter, OrderedDict, namedtuple

import pytest

from fleetrl.envs.verifier import call_grader
from fleetrl.envs.verifier.call_worker import (
    MAX_DEPTH,
    MAX_MESSAGE_BYTES,
    Channel,
    NotPlain,
    decode,
    encode,
)


def cross(value):
    """`value` as the other side rebuilds it."""
    return decode(json.loads(json.dumps(encode(value))))


def test_plain_values_cross_as_themselves():
    value = {
        "n": [None, True, 0, -(10**30), 1.5, -0.0, math.inf, "é\n"],
        (1, "k"): {frozenset({1, 2}): {3, 4}},
        b"\x00\xff": (b"", ()),
        7: [[], {}, set()],
    }
    assert cross(value) == value
    assert math.isnan(cross(math.nan))
    assert type(cross((1,))) is tuple and type(cross({1})) is set
    assert type(cross(frozenset())) is frozenset and type(cross(b"x")) is bytes


class Color(enum.IntEnum):
    RED = 1


class Liar(int):
    __eq__ = int.__ne__  # an "always-equal" answer, as the cheat corpus writes it
    __hash__ = int.__hash__


class Shouty(str):
    def __str__(self):
        return "forged"

    def __eq__(self, other):
        return True

    __hash__ = str.__hash__


def test_subclasses_cross_as_their_base_type_read_by_its_own_methods():
    pair = namedtuple("Pair", "a b")
    assert cross(pair(1, 2)) == (1, 2) and type(cross(pair(1, 2))) is tuple
    assert cross(Counter("aab")) == {"a": 2, "b": 1} and type(cross(Counter())) is dict
    assert type(cross(OrderedDict(a=1))) is dict and cross(Color.RED) == 1
    liar = cross(Liar(5))
    assert type(liar) is int and liar == 5 and liar != 6
    text = cross(Shouty("real"))
    assert type(text) is str and text == "real" and text != "anything"


def test_what_is_not_plain_never_crosses():
    cycle: list = []
    cycle.append(cycle)
    deep: list = []
    for _ in range(MAX_DEPTH + 2):
        deep = [deep]
    for value in (object(), len, cycle, deep, {1: object()}, Color, 1j, bytearray(b"x")):
        with pytest.raises(NotPlain):
            encode(value)


@pytest.mark.parametrize(
    "data",
    [{"tuple": 1}, {"x": []}, {"set": [[1]]}, {"dict": [[[1], 2]]}, {"dict": [[1]]},
     {"bytes": "zz"}, {"tuple": [], "set": []}, {"frozenset": [{"y": 1}]}],
)  # fmt: skip
def test_decoding_refuses_what_encoding_never_writes(data):
    with pytest.raises(NotPlain):
        decode(data)


def test_the_channel_frames_lines_and_bounds_them():
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    left, right = Channel(r2, w1), Channel(r1, w2)
    try:
        left.send({"id": 1, "value": [1, 2]})
        left.send({"id": 2})
        assert right.receive() == {"id": 1, "value": [1, 2]}
        assert right.receive() == {"id": 2}
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            left.receive(time.monotonic() + 0.2)
        assert time.monotonic() - start < 2
        with pytest.raises(ValueError):
            left.send({"id": 3, "value": "x" * MAX_MESSAGE_BYTES})
        os.close(w2)  # the other side ends: end-of-file, never a wait
        with pytest.raises(EOFError):
            Channel(r2, w1).receive(time.monotonic() + 5)
    finally:
        for fd in (r2, w1, r1):
            os.close(fd)


def test_a_line_without_end_is_never_read_whole():
    r, w = os.pipe()

    def flood() -> None:
        with contextlib.suppress(BrokenPipeError):
            os.write(w, b"[" * (2 * MAX_MESSAGE_BYTES))  # no newline

    writer = threading.Thread(target=flood)
    writer.start()
    try:
        with pytest.raises(ValueError):
            Channel(r, -1).receive(time.monotonic() + 10)
    finally:
        os.close(r)
        writer.join()
        os.close(w)


def test_exceptions_are_rebuilt_by_kind_never_as_the_workers_objects():
    remote = call_grader.Remote(None, 1.0)
    error = remote.rebuild("ValueError", ["ValueError", "Exception", "BaseException"], "m")
    assert type(error) is ValueError and str(error) == "m"
    custom = remote.rebuild("EmptyError", ["ValueError", "Exception"], "empty")
    assert isinstance(custom, ValueError) and isinstance(custom, call_grader.RemoteError)
    assert type(custom).__name__ == "EmptyError"
    # Leaving or interrupting is the worker's business: here it is only a failure.
    for name in ("SystemExit", "KeyboardInterrupt", "GeneratorExit"):
        stopped = remote.rebuild(name, [name, "BaseException"], "0")
        assert isinstance(stopped, call_grader.RemoteError), name
    fallback = remote.rebuild("UnicodeDecodeError", ["UnicodeDecodeError", "ValueError"], "x")
    assert type(fallback) is call_grader.RemoteError
    assert type(remote.rebuild("not a name!", [], "x")).__name__ == "RemoteError"


class Replies:
    """A channel whose replies are given in advance."""

    frame = staticmethod(Channel.frame)

    def __init__(self, *replies):
        self.replies = list(replies)

    def send(self, message, deadline=None):
        pass

    def receive(self, deadline=None):
        return self.replies.pop(0)


@pytest.mark.parametrize(
    "reply", [{"id": 7, "value": 1}, ["id", 1], {"id": 1, "raised": {"type": "ValueError"}}]
)
def test_a_worker_that_breaks_the_protocol_is_gone_for_every_later_call(reply):
    remote = call_grader.Remote(Replies(reply, {"id": 2, "value": 1}), 1.0)
    with pytest.raises(call_grader.WorkerGone):
        remote.call("m", ["f"], (), {})
    with pytest.raises(call_grader.WorkerGone):  # even though its next reply is well formed
        remote.call("m", ["f"], (), {})


def test_an_argument_the_wire_cannot_carry_fails_that_call_only():
    remote = call_grader.Remote(Replies({"id": 1, "value": [1]}), 1.0)
    with pytest.raises(call_grader.NotPlainData):
        remote.call("m", ["f"], ("x" * MAX_MESSAGE_BYTES,), {})
    with pytest.raises(call_grader.NotPlainData):
        remote.call("m", ["f"], (object(),), {})
    assert remote.call("m", ["f"], (1,), {}) == [1] and remote.gone is None
