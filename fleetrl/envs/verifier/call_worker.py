"""Calls mode, the worker: the one process that runs the code under test, and the wire.

The verifier copies this file out of the package (it imports only the standard library) and
runs it in a sandbox over the pristine repository with the agent's files applied and no
hidden test anywhere, as

    python -I -B call_worker.py '{"read": R, "write": W, "rootdir": D}'

R and W are the ends of two pipes to the grader (`call_grader.py`, in another sandbox),
which holds the hidden tests and never imports the workspace. The worker appends the
repository root to `sys.path` (the standard library and site-packages win, as under the
grader runner), then answers requests one at a time until the grader closes its end.
Nothing here is trusted: the agent's code runs in this process and may replace any of it;
what it sends back is only ever read by the grader as plain data (`decode`), so the worst
a hostile worker can do is answer wrongly, which is what wrong code does anyway.

The wire (also read by `call_grader.py`, which loads this file by path):

- one JSON document per line, ASCII, at most MAX_MESSAGE_BYTES with its newline;
- requests `{"id": N, "op": OP, "module": M, "path": [NAME, ...], ...}`, OP one of
  `import` (import M), `getattr` (M.NAME...: `{"kind": "callable"}`, `{"kind": "module",
  "name": ITS NAME}` or the value), `names` (M's `__all__`, else its public names but
  modules), `call` (with `"args"`, a list, and `"kwargs"`, a dict, both encoded);
- replies `{"id": N, "value": V}`, `{"id": N, "kind": K}`, `{"id": N, "unplain": TEXT}`
  (the value is not plain data) or `{"id": N, "raised": {"type": T, "bases": [B...],
  "message": TEXT}}` (B: the names of the builtin classes in the exception's MRO);
- values: null, booleans, strings, integers and floats (NaN and Infinity as Python's json
  writes them) are themselves; a list is a list; every other value is an object with one
  key: `{"tuple": [...]}`, `{"dict": [[K, V], ...]}`, `{"set": [...]}`,
  `{"frozenset": [...]}`, `{"bytes": HEX}`. A subclass of one of these types (an IntEnum, a
  Counter, a namedtuple) is read through its base type's own methods and sent as that type;
  anything else (an instance, a function, a cycle, nesting over MAX_DEPTH) is not plain.

Not covered: arguments are copies (a call that mutates its argument changes nothing the
test sees); objects other than plain data cannot cross (classes are called, not compared).
"""

from __future__ import annotations

import builtins
import fcntl
import importlib
import json
import os
import select
import sys
import time
import types
from typing import Any

MAX_MESSAGE_BYTES = 1 << 20
MAX_DEPTH = 100
MAX_TEXT = 4000  # characters of an exception's message that cross
_CHANNEL_FDS = 256  # the worker moves its pipe ends at or above this number


class NotPlain(TypeError):
    """A value outside the plain data the wire carries."""


def encode(value: Any, depth: int = 0) -> Any:
    """`value` as the wire's JSON-ready form (see the module docstring), or NotPlain."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH} levels (or a cycle)")
    kind = type(value)
    if value is None or kind is bool:
        return value
    # Subclasses are read through the base type's own methods: an override cannot answer.
    if issubclass(kind, int):
        return int.__int__(value)
    if issubclass(kind, float):
        return float.__float__(value)
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, bytes):
        return {"bytes": bytes.hex(value)}
    if issubclass(kind, list):
        return [encode(item, depth + 1) for item in list.__iter__(value)]
    if issubclass(kind, tuple):
        return {"tuple": [encode(item, depth + 1) for item in tuple.__iter__(value)]}
    if issubclass(kind, dict):
        pairs = dict.items(value)  # type: ignore[arg-type]
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in pairs]}
    if issubclass(kind, frozenset):
        return {"frozenset": [encode(item, depth + 1) for item in frozenset.__iter__(value)]}
    if issubclass(kind, set):
        return {"set": [encode(item, depth + 1) for item in set.__iter__(value)]}
    raise NotPlain(f"a {kind.__name__} is not plain data")


def decode(data: Any) -> Any:
    """Fresh Python values from what `json.loads` made of an encoded value; NotPlain for
    anything `encode` does not write. Only builtin constructors run."""
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is list:
        return [decode(item) for item in data]
    if kind is dict and len(data) == 1:
        ((tag, body),) = data.items()
        try:
            if tag == "bytes" and type(body) is str:
                return bytes.fromhex(body)
            if type(body) is list:
                if tag == "tuple":
                    return tuple(decode(item) for item in body)
                if tag == "set":
                    return {decode(item) for item in body}
                if tag == "frozenset":
                    return frozenset(decode(item) for item in body)
                if tag == "dict" and all(type(p) is list and len(p) == 2 for p in body):
                    return {decode(k): decode(v) for k, v in body}
        except (TypeError, ValueError) as err:  # an unhashable key or element, bad hex
            raise NotPlain(f"a malformed {tag}: {err}") from None
    raise NotPlain(f"not an encoded value: {str(data)[:80]}")


class Channel:
    """Line-framed JSON over a pair of pipe ends; `deadline` (time.monotonic()) bounds a
    send or a receive when given. EOFError: the other side is gone; TimeoutError: the
    deadline passed; ValueError: a message over MAX_MESSAGE_BYTES or not JSON."""

    def __init__(self, read_fd: int, write_fd: int) -> None:
        self.read_fd, self.write_fd = read_fd, write_fd
        self.buffer = b""

    @staticmethod
    def frame(message: dict[str, Any]) -> bytes:
        """`message` as one line; ValueError if it cannot be one (too large, an integer
        too long to write)."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        if len(data) > MAX_MESSAGE_BYTES:
            raise ValueError(f"a message of {len(data)} bytes (limit {MAX_MESSAGE_BYTES})")
        return data

    def send(self, message: dict[str, Any] | bytes, deadline: float | None = None) -> None:
        """Send a message (or a line `frame` made)."""
        data = message if isinstance(message, bytes) else self.frame(message)
        while data:
            _wait(self.write_fd, select.POLLOUT, deadline)
            try:
                data = data[os.write(self.write_fd, data) :]
            except BlockingIOError:
                continue
            except BrokenPipeError:
                raise EOFError("the other side closed its end") from None

    def receive(self, deadline: float | None = None) -> Any:
        while b"\n" not in self.buffer:
            if len(self.buffer) >= MAX_MESSAGE_BYTES:
                raise ValueError(f"a message over {MAX_MESSAGE_BYTES} bytes")
            _wait(self.read_fd, select.POLLIN, deadline)
            try:
                chunk = os.read(self.read_fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                raise EOFError("the other side closed its end")
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        if len(line) >= MAX_MESSAGE_BYTES:
            raise ValueError(f"a message over {MAX_MESSAGE_BYTES} bytes")
        return json.loads(line)


def _wait(fd: int, event: int, deadline: float | None) -> None:
    """Until `fd` is ready for `event` (or hung up), or TimeoutError at `deadline`."""
    poller = select.poll()
    poller.register(fd, event)
    while True:
        left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
        if poller.poll(None if left is None else left * 1000):
            return
        if left is not None and left <= 0:
            raise TimeoutError("no answer in time")


# -- the worker ------------------------------------------------------------------------------


def _resolve(request: dict[str, Any]) -> Any:
    target = importlib.import_module(str(request["module"]))
    for name in request.get("path", []):
        target = getattr(target, str(name))
    return target


def _answer(request: dict[str, Any]) -> dict[str, Any]:
    op = request["op"]
    if op == "import":
        importlib.import_module(str(request["module"]))
        return {"value": None}
    target = _resolve(request)
    if op == "getattr":
        if isinstance(target, types.ModuleType):
            return {"kind": "module", "name": str(target.__name__)}
        try:
            return {"value": encode(target)}
        except NotPlain:
            if not callable(target):
                raise
            return {"kind": "callable"}
    if op == "names":
        names = getattr(target, "__all__", None)
        if names is None:  # the modules it imported stay out: the tests have their own
            public = vars(target).items()
            names = [k for k, v in public if k[:1] != "_" and not isinstance(v, types.ModuleType)]
        return {"value": encode([str(name) for name in names])}
    if op == "call":
        args, kwargs = decode(request["args"]), decode(request["kwargs"])
        result = target(*args, **kwargs)
        try:
            return {"value": encode(result)}
        except NotPlain as err:
            return {"unplain": str(err)}
    raise ValueError(f"unknown request {op!r}")


def _describe(error: BaseException) -> dict[str, Any]:
    """An exception as its type's name, the builtin classes it derives from, its text."""
    kind = type(error)
    bases = [c.__name__ for c in kind.__mro__ if vars(builtins).get(c.__name__) is c]
    try:
        message = str(error)[:MAX_TEXT]
    except BaseException:  # its __str__ is the agent's code
        message = "<unprintable>"
    return {"type": kind.__name__, "bases": bases, "message": message}


def _private(fd: int) -> int:
    """`fd` moved to a high number, closed on exec, so that code under test writing to the
    first descriptors (or a program it starts) does not land in the channel."""
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, _CHANNEL_FDS)
    os.close(fd)
    return moved


def main(spec: dict[str, Any]) -> None:
    """Answer the grader's requests until it closes its end; never returns."""
    leave = os._exit
    channel = Channel(_private(int(spec["read"])), _private(int(spec["write"])))
    # A forked child (multiprocessing) must not answer in the worker's place.
    os.register_at_fork(
        after_in_child=lambda: [os.close(fd) for fd in (channel.read_fd, channel.write_fd)]
    )
    sys.path.append(str(spec["rootdir"]))
    while True:
        try:
            request = channel.receive()
        except (EOFError, ValueError):
            leave(0)
        reply: dict[str, Any] = {"id": request.get("id") if type(request) is dict else None}
        try:
            reply.update(_answer(request))
        except BaseException as error:  # whatever the code under test raises
            reply["raised"] = _describe(error)
        try:
            channel.send(reply)
        except ValueError as err:  # too large to send
            channel.send({"id": reply["id"], "unplain": str(err)})
        except EOFError:
            leave(0)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
