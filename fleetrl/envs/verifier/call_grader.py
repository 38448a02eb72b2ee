"""Calls mode, the grader: pytest over the hidden tests in a process that never imports the
workspace.

The verifier copies this file, `call_worker.py` and `call_fresh.py` out of the package (they
import only the standard library and pytest) and runs this one in a sandbox that holds the
hidden test files and nothing of the repository, as

    python -I -B call_grader.py '{"rootdir": R, "config": C, "tests": [...], "read": FD,
                                  "write": FD, "call_timeout": S, "reference": [FD, FD]}'

while the worker (`call_worker.py`) runs in a second sandbox over the agent's code, joined to
this process by two pipes (FD). No code of the agent's ever runs here:

- imports the interpreter cannot satisfy (stdlib, site-packages, the hidden test files
  themselves), when a hidden test module asks for them, resolve to *proxy modules*: a
  finder at the end of `sys.meta_path` makes one, and its `exec_module` asks the worker
  to import the module there (an ImportError, a SyntaxError come back and are raised
  here, as the import statement would raise them in-process);
- a proxy module's attributes are fetched from the worker on first use: a function (any
  callable) becomes a *remote function*, a module a proxy module (never a module of this
  process), a plain value is rebuilt here; calling a remote function sends its arguments
  as plain data and rebuilds the result from plain data (`call_worker.decode`: only
  builtin constructors run);
- an exception raised by the code under test comes back by type name and message: a
  builtin exception type is raised as itself; any other type as a class made here, named
  like it and derived from `RemoteError` and from the first builtin exception in its MRO
  (so `pytest.raises(ValueError)` still catches a `ValueError` subclass); a result that is
  not plain data raises `NotPlainData`;
- a worker that breaks the protocol, dies, or does not answer within `call_timeout`
  seconds is gone: that call and every later one raise `WorkerGone`.

The outcome is then decided from fresh values by pytest in this process: an always-equal
object, a patched pytest, a frame walk or an exit in the worker can only change what the
worker answers. After the tests, when given a reference worker (the gold solution, over a
third pair of pipe ends), the grader checks the agent's code on fresh inputs drawn from the
calls the tests made (`call_fresh`). Records go to a private copy of stdout in the grader
runner's format (`grader_runner.py`: collected, report, final; `blocked` is never written
here, nothing runs here that could need refusing), so the host judges them alike; the fresh
inputs' record, `{"kind": "fresh", "checked": N, "differ": [TEXT...]}`, comes right before
the final one.

Not covered: tests that pass objects other than plain data to the code under test or get
such objects back (instances, callbacks, files), that compare against its classes or
exception types (`pytest.raises(module.Error)`), or that read or patch its module state
directly (`monkeypatch.setattr(module, ...)`), or that read the repository's files (only the
hidden ones are here): those suites grade in pytest mode.
"""

from __future__ import annotations

import builtins
import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import random
import sys
import time
import types
from typing import Any

import pytest


def _load(name: str) -> types.ModuleType:
    """`name`.py from this file's folder, under a private name (a hidden test module named
    like it stays the test's)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"_fleetrl_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


wire = _load("call_worker")
fresh = _load("call_fresh")
MAX_RECORDED = 2000  # calls replayed to the reference; past it, no fresh input is drawn
_BUILTIN_ERRORS = {
    name: value
    for name, value in vars(builtins).items()
    if isinstance(value, type) and issubclass(value, Exception)
}
# Frames an import passes through between the statement that asks and the finder.
_IMPORT_MACHINERY = ("<frozen importlib", os.path.join(os.path.dirname(importlib.__file__), ""))


class RemoteError(Exception):
    """The code under test raised an exception whose type is not a builtin one."""


class NotPlainData(TypeError):
    """The code under test returned (or was given) something other than plain data."""


class WorkerGone(RuntimeError):
    """The worker died, hung or broke the protocol: this and every later call fail."""


class Remote:
    """The grader's end of the wire: one request at a time, each within `timeout` seconds."""

    def __init__(self, channel: Any, timeout: float) -> None:
        self.channel, self.timeout = channel, timeout
        self.sequence = 0
        self.gone: str | None = None
        self.classes: dict[tuple[str, type], type] = {}
        self.calls: list[tuple[str, list[str], list[Any], dict[str, Any]]] = []  # as made

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """The worker's reply to `request`, checked for shape; WorkerGone otherwise."""
        __tracebackhide__ = True  # a failing test shows its own line, not the wire's
        if self.gone is not None:
            raise WorkerGone(self.gone)
        try:
            line = self.channel.frame({"id": self.sequence + 1, **request})
        except ValueError as err:  # the test's own arguments: that call fails, nothing more
            raise NotPlainData(f"the wire cannot carry this call: {err}") from None
        self.sequence += 1
        deadline = time.monotonic() + self.timeout
        try:
            self.channel.send(line, deadline)
            reply = self.channel.receive(deadline)
        except TimeoutError:
            self.gone = f"the code under test did not answer within {self.timeout:g} s"
        except (EOFError, OSError):
            self.gone = "the code under test's process ended"
        except (ValueError, RecursionError):
            self.gone = "the code under test's process sent a malformed message"
        else:
            if type(reply) is dict and reply.get("id") == self.sequence:
                return reply
            self.gone = "the code under test's process answered out of turn"
        raise WorkerGone(self.gone)

    def result(self, reply: dict[str, Any]) -> Any:
        """The value a reply carries, rebuilt here, or the exception it reports, raised."""
        __tracebackhide__ = True
        if "value" in reply:
            try:
                return wire.decode(reply["value"])
            except (wire.NotPlain, RecursionError):
                raise NotPlainData("the code under test's answer is not plain data") from None
        if type(reply.get("unplain")) is str:
            raise NotPlainData(reply["unplain"][: wire.MAX_TEXT])
        raised = reply.get("raised")
        if (
            type(raised) is dict
            and type(raised.get("type")) is str
            and type(raised.get("message")) is str
            and type(raised.get("bases")) is list
        ):
            raise self.rebuild(raised["type"], raised["bases"], raised["message"])
        self.gone = "the code under test's process sent a malformed reply"
        raise WorkerGone(self.gone)

    def rebuild(self, name: str, bases: list[Any], message: str) -> Exception:
        """A fresh exception standing for one the code under test raised."""
        message = message[: wire.MAX_TEXT]
        base = next((_BUILTIN_ERRORS[b] for b in bases if b in _BUILTIN_ERRORS), Exception)
        name = name if name.isidentifier() else "RemoteError"
        try:
            if _BUILTIN_ERRORS.get(name) is base:
                return base(message)
            if (name, base) not in self.classes:
                parents = (RemoteError,) if base is Exception else (RemoteError, base)
                self.classes[name, base] = type(name, parents, {"__module__": "remote"})
            return self.classes[name, base](message)
        except Exception:  # a builtin whose constructor wants more (UnicodeDecodeError)
            return RemoteError(f"{name}: {message}")

    def attribute(self, module: str, path: list[str]) -> Any:
        """`module.path...` as the tests see it: a remote function, a proxy module or a
        plain value."""
        reply = self.ask({"op": "getattr", "module": module, "path": path})
        kind, name = reply.get("kind"), reply.get("name")
        if kind == "callable":
            return RemoteFunction(self, module, path)
        if kind == "module" and type(name) is str and name:
            return proxy_module(self, name)  # never imported here, whatever its name
        return self.result(reply)

    def call(self, module: str, path: list[str], args: tuple, kwargs: dict[str, Any]) -> Any:
        __tracebackhide__ = True
        try:
            encoded = {"args": wire.encode(list(args)), "kwargs": wire.encode(kwargs)}
        except wire.NotPlain as err:
            raise NotPlainData(f"an argument is not plain data: {err}") from None
        if len(self.calls) <= MAX_RECORDED:  # a copy: the test may change its arguments
            decoded = (wire.decode(encoded["args"]), wire.decode(encoded["kwargs"]))
            self.calls.append((module, list(path), *decoded))
        return self.result(self.ask({"op": "call", "module": module, "path": path, **encoded}))


class RemoteFunction:
    """A callable of the code under test: each call runs in the worker."""

    def __init__(self, remote: Remote, module: str, path: list[str]) -> None:
        self._remote, self._module, self._path = remote, module, path
        self.__name__ = self.__qualname__ = path[-1]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        __tracebackhide__ = True
        return self._remote.call(self._module, self._path, args, kwargs)

    def __getattr__(self, name: str) -> RemoteFunction:
        # A class's or function's own callables (`Parser.parse`), resolved when called;
        # private and special names are not looked up remotely (pytest probes some).
        if name.startswith("_"):
            raise AttributeError(name)
        return RemoteFunction(self._remote, self._module, [*self._path, name])

    def __repr__(self) -> str:
        return f"<remote {self._module}.{'.'.join(self._path)}>"


class ProxyModule(types.ModuleType):
    """A module of the code under test, as seen from the grader."""

    __remote__: Remote

    def __getattr__(self, name: str) -> Any:
        if name == "__all__":
            return self.__remote__.result(
                self.__remote__.ask({"op": "names", "module": self.__name__})
            )
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = self.__remote__.attribute(self.__name__, [name])
        if isinstance(value, RemoteFunction | types.ModuleType):
            setattr(self, name, value)  # values are read anew: module state may change
        return value


def proxy_module(remote: Remote, name: str) -> ProxyModule:
    """A proxy for the worker's module `name`."""
    module = ProxyModule(name)
    module.__remote__ = remote
    return module


class ProxyFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on `sys.meta_path`: what nothing else found, asked for by a hidden test module
    (or under a proxy package), is the code under test's."""

    def __init__(self, remote: Remote, rootdir: str) -> None:
        self.remote, self.root = remote, os.path.join(rootdir, "")

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        parent = fullname.rpartition(".")[0]
        if parent and not isinstance(sys.modules.get(parent), ProxyModule):
            return None
        if not parent and not self._asked_by_tests():
            return None  # pytest's own optional imports fail as they would anywhere
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def _asked_by_tests(self) -> bool:
        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
            frame = frame.f_back
        if frame is not None and frame.f_code.co_name == "importorskip":
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename.startswith(self.root)

    def create_module(self, spec: Any) -> types.ModuleType:
        return proxy_module(self.remote, spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        self.remote.result(self.remote.ask({"op": "import", "module": module.__name__}))


class ReportPlugin:
    """The grader runner's records (collected, report), from this process's pytest."""

    def __init__(self, emit: Any, rootdir: str) -> None:
        self.emit, self.rootdir = emit, rootdir

    def pytest_collectstart(self, collector: Any) -> None:
        """Hash each test module's bytes right before pytest imports it."""
        if type(collector).__name__ not in ("Module", "DoctestModule"):
            return
        with open(collector.path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        path = os.path.relpath(collector.path, self.rootdir)
        self.emit({"kind": "collected", "path": path, "sha256": digest})

    def pytest_runtest_logreport(self, report: Any) -> None:
        """One record per test phase (setup, call, teardown)."""
        record = {"nodeid": report.nodeid, "when": report.when, "outcome": report.outcome}
        self.emit({"kind": "report", **record})


def fresh_checks(agent: Remote, reference: Remote) -> tuple[int, list[str]]:
    """How many fresh inputs the gold solution answered, and where the agent's code
    answered otherwise (`call_fresh`). The reference first replays the tests' calls."""
    if len(agent.calls) > MAX_RECORDED:
        return 0, []
    rng = random.Random(os.urandom(16))
    for module, path, args, kwargs in agent.calls:
        try:
            reference.call(module, path, tuple(args), kwargs)
        except WorkerGone:
            return 0, []
        except Exception:  # the tests' own failing calls fail for the gold solution too
            continue
    checked, differ = 0, []
    for module, path, args, kwargs in fresh.fresh_inputs(agent.calls, rng):
        try:
            expected = reference.call(module, path, tuple(args), kwargs)
        except WorkerGone:
            break
        except Exception:  # an input the gold solution rejects says nothing
            continue
        checked += 1
        try:
            answer = agent.call(module, path, tuple(args), kwargs)
        except Exception as err:
            answer = err
        if isinstance(answer, Exception) or not fresh.same(expected, answer):
            call = f"{module}.{'.'.join(path)}(*{args!r}, **{kwargs!r})"
            differ.append(f"{call}: {answer!r}, the gold solution {expected!r}"[:400])
    return checked, differ


def main(spec: dict[str, Any]) -> None:
    """Run pytest as `spec` says, calls going to the worker; never returns."""
    report_fd = os.dup(1)
    os.dup2(2, 1)  # pytest's own output goes to stderr; the records alone to stdout

    def emit(record: dict[str, Any]) -> None:
        data = (json.dumps(record) + "\n").encode()
        while data:
            data = data[os.write(report_fd, data) :]

    rootdir = str(spec["rootdir"])
    read_fd, write_fd = int(spec["read"]), int(spec["write"])
    for fd in (read_fd, write_fd, *spec.get("reference", ())):
        os.set_inheritable(fd, False)  # programs the hidden tests start do not get them
        os.set_blocking(fd, False)  # each call waits at most call_timeout
    remote = Remote(wire.Channel(read_fd, write_fd), float(spec["call_timeout"]))
    sys.meta_path.append(ProxyFinder(remote, rootdir))
    args = ["-q", "-p", "no:cacheprovider", "--import-mode=append", f"--rootdir={rootdir}"]
    args += [f"--confcutdir={rootdir}", "-c", str(spec["config"]), "--", *spec["tests"]]
    code = int(pytest.main(args, plugins=[ReportPlugin(emit, rootdir)]))
    if "reference" in spec:
        reference = Remote(wire.Channel(*map(int, spec["reference"])), remote.timeout)
        checked, differ = fresh_checks(remote, reference)
        emit({"kind": "fresh", "checked": checked, "differ": differ})
    emit({"kind": "final", "exit": code, "blocked": []})
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(code)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
