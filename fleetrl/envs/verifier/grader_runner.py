"""The grading run: pytest over the hidden tests, in the process that imports the agent's code.

The verifier copies this file out of the package (it imports only the standard library and
pytest) and runs it in the grading sandbox as (node ids one argument each: a kernel takes
128 KiB in one argument)

    python -I -B grader_runner.py '{"rootdir": R, "config": C, "protected": [...]}' TEST...

Isolated mode (`-I`) ignores PYTHON* variables and the user site, and puts neither the
script's folder nor the working directory on `sys.path`; the runner then *appends* the
repository root, and pytest runs with `--import-mode=append`, so the standard library, pytest
and its dependencies always win over a same-named file of the agent's.

Before any code of the workspace runs, the runner (docs/environments.md: why, and tests):

- keeps a private, close-on-exec duplicate of stdout as the report channel, points fd 1 at
  stderr, and makes itself non-dumpable (no child reaches the channel through /proc);
- makes `_posixsubprocess.fork_exec` raise an audit event as `subprocess` does, and
  `os.open` with a `dir_fd` raise its `open` event for the whole path;
- binds the primitives it reports with (`os.write`, the JSON encoder, sha256, `os._exit`)
  to local names, and replaces `os._exit` (and `posix._exit`) so that only the runner,
  after its final record, ends its process with pytest's status (TAMPERED_EXIT otherwise;
  a forked child exits as asked and never holds the channel);
- installs an audit hook (it cannot be removed), switched on right before `pytest.main`,
  that refuses and reports ctypes, the gc object graph, other threads' frames, tracing and
  profiling hooks, signals, in-process exec, /proc/<pid>/mem, environ or fd entries,
  writes to a protected (hidden test) file, and reads of a hidden test module when the
  innermost repository frame asking is the workspace's own or the thread is not the main
  one. The hidden tests themselves may trace, profile, signal and walk the gc graph (a
  doctest runner, a process pool): allowed on the main thread when every repository frame
  on the stack runs code the import system compiled from a hidden test file (recorded
  when the loader ran it), and at least one does; so is the doctest runner's own
  `sys.settrace`. A trace or profile function still installed when a test ends is
  reported (a finalizer of the agent's could install one from a test's frame);
- refuses starting a program from the workspace's code (or off the main thread) while the
  tests are collected, and afterwards from any thread that can still read a test module;
- remembers what every name of its machinery (pytest, pluggy, builtins, os, sys, json,
  hashlib) is bound to and which plugins and import hooks are in place at collection; a
  rebinding, a late non-conftest plugin or import hook, or a test module not imported from
  its own file is reported.

Once collection is done, the runner confines its main thread with Landlock where the kernel
has it: neither that thread nor any thread or process it starts can then open a collected
test module (or a hidden conftest), since the audit hook does not reach child processes;
every other file stays readable. Without Landlock a child process can still read them.

Records, one JSON object per line on the report channel:

    {"kind": "collected", "path": P, "sha256": H}    a test module, hashed just before import
    {"kind": "report", "nodeid": N, "when": W, "outcome": O}   one per test phase; a
                                                     test's subtests are folded into its call
    {"kind": "blocked", "event": E}                  something the runner refused or saw
    {"kind": "final", "exit": X, "blocked": [E...]}  pytest's exit status, written last

then `os._exit(X)`. The host trusts none of it on its own: it checks the lines against each
other, the hidden tests' hashes it took and the exit status it saw (`judge.py`). Not
covered: code under test can still write to the report descriptor; such lines show up as
duplicates or contradictions (docs/environments.md has what remains).
"""

from __future__ import annotations

import _thread
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

import pytest

Emit = Callable[[dict[str, Any]], None]
_PROC = re.compile(
    r"/proc/(self|thread-self|\d+)(/task/\d+)?"
    r"(/?|/(mem|environ|fd|fdinfo|map_files|pagemap)(/.*)?)"
)
_BLOCKED = frozenset(
    {
        "gc.get_objects",
        "gc.get_referrers",
        "gc.get_referents",
        "sys._current_frames",
        "sys._current_exceptions",
        "sys.settrace",
        "sys.setprofile",
        "os.kill",
        "os.killpg",
        "signal.pthread_kill",
        "os.exec",
    }
)
# What the hidden tests' own code may do (see asked_by_tests): it is the task's, not the agent's.
_TESTS_MAY = _BLOCKED - {"os.exec"}
_PR_SET_DUMPABLE = 4
TAMPERED_EXIT = 86  # the status of a process that something other than the runner ended
_PATH_EVENTS = {"os.rename": 2, "os.remove": 1, "os.rmdir": 1, "os.truncate": 1, "os.link": 1}
# Events that start a program: it has no audit hook, so only Landlock keeps it from reading
# the tests, and a program inherits the confinement of the thread that starts it.
_CHILD_EVENTS = frozenset(
    {"subprocess.Popen", "os.system", "os.posix_spawn", "_posixsubprocess.fork_exec"}
)
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
# Modules whose functions the report depends on; rebinding one of their names is tampering.
_WATCHED = ("builtins", "os", "posix", "sys", "json", "json.encoder", "hashlib", "io", "pytest",
            "_posixsubprocess")  # fmt: skip
_WATCHED_PREFIXES = ("_pytest.", "pluggy.")
# Landlock (linux/landlock.h): the system calls, and the one access right confinement handles.
_SYS_CREATE_RULESET, _SYS_ADD_RULE, _SYS_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_READ_FILE, _LANDLOCK_RULE_PATH_BENEATH = 1 << 2, 1
_PR_SET_NO_NEW_PRIVS = 38


def _reporter(fd: int) -> Emit:
    """A function writing one record as one JSON line, immune to later monkeypatching."""
    write, quote, dumps = os.write, json.encoder.encode_basestring_ascii, repr

    def emit(record: dict[str, Any]) -> None:
        fields = []
        for key, value in record.items():
            if isinstance(value, list):
                text = "[" + ",".join(quote(str(v)) for v in value) + "]"
            elif type(value) is int:
                text = dumps(value)
            else:
                text = quote(str(value))
            fields.append(f"{quote(key)}:{text}")
        data = ("{" + ",".join(fields) + "}\n").encode()
        while data:
            data = data[write(fd, data) :]

    return emit


def _install_audit_hook(
    emit: Emit, protected: frozenset[str], safe_fspath: frozenset[Any], rootdir: str
) -> Callable[[list[str]], None]:
    """Install the audit hook, off until the event `fleetrl.grader.start`; nothing switches it
    off again, and what it refused is read back by `fleetrl.grader.blocked` (a list to fill):
    no reference to its state outlives this call's frame but the function returned, which
    confines the main thread once collection is done (`_landlock`)."""
    switch, blocked, collected, confined = [False], [], [False], [b""]
    getcwd, join, normpath, realpath, fsdecode, getframe, thread = (
        os.getcwd, os.path.join, os.path.normpath, os.path.realpath, os.fsdecode,
        sys._getframe, _thread.get_native_id,
    )  # fmt: skip
    proc, events, path_events, write_flags = _PROC.fullmatch, _BLOCKED, _PATH_EVENTS, _WRITE_FLAGS
    child_events, runner = _CHILD_EVENTS, _install_audit_hook.__code__.co_filename
    root, main = join(rootdir, ""), thread()
    test_sources = frozenset(p for p in protected if p.endswith(".py"))
    restrict, readable = _landlock()
    tests_may, loaders, doctest_run, code_type = _tests_may_context()
    genuine: set[int] = set()  # ids of the code objects compiled from hidden test files
    kept: list[object] = []  # ... kept alive, so that no other code object takes an id

    def trust(module_code: Any) -> None:
        todo = [module_code]
        while todo:
            code = todo.pop()
            if id(code) not in genuine:
                genuine.add(id(code))
                kept.append(code)
                todo += [c for c in code.co_consts if type(c) is code_type]

    def loaded_by_the_import_system(code: Any) -> bool:
        # A hidden module's code, run by pytest's rewriting loader or importlib's, which
        # read it from its file; with no workspace frame below (the agent's import of it).
        if code.co_name != "<module>" or normpath(code.co_filename) not in test_sources:
            return False
        frame = getframe(1)
        while frame is not None and frame.f_code.co_filename == runner:
            frame = frame.f_back
        if frame is None or thread() != main:
            return False
        caller, outer = frame.f_code, frame.f_back
        if caller is not loaders[0] and not (
            caller is loaders[1] and outer is not None and outer.f_code is loaders[2]
        ):
            return False
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(root) and name != runner and id(frame.f_code) not in genuine:
                return False
            frame = frame.f_back
        return True

    def asked_by_tests(event: str) -> bool:
        # The hidden tests' own call chain (through pytest and the standard library): every
        # repository frame runs genuine hidden test code, and one does; main thread only.
        if event not in tests_may or thread() != main:
            return False
        frame, seen, first = getframe(1), False, None
        while frame is not None:
            name = frame.f_code.co_filename
            if name != runner and first is None:
                first = frame.f_code
            if name.startswith(root) and name != runner:
                if id(frame.f_code) not in genuine:
                    return False
                seen = True
            frame = frame.f_back
        return seen or (event == "sys.settrace" and first is doctest_run)

    def asked_by_workspace() -> bool:
        # The innermost frame of the repository's code decides, whatever library it called
        # (pathlib, tarfile, linecache, a loader): a module of the workspace other than the
        # hidden tests is the agent's. pytest, and the warnings machinery showing a test's
        # line, read with no repository frame below them.
        frame = getframe(1)
        while frame is not None:
            name = frame.f_code.co_filename
            if name.startswith(root) and name != runner:
                return normpath(name) not in protected
            frame = frame.f_back
        return False

    def paths(value: object) -> list[str]:
        if isinstance(value, os.PathLike) and type(value).__fspath__ in safe_fspath:
            value = os.fspath(value)
        if isinstance(value, int):
            return []
        if not isinstance(value, str | bytes):
            # A user-defined path-like could answer the hook one path and open() another.
            raise TypeError("a custom path-like object")
        # realpath of the path as given: the kernel follows a link before a `..` after it,
        # where normpath would drop both first.
        joined = join(getcwd(), fsdecode(value))
        return [normpath(joined), realpath(joined)]

    def refusal(event: str, args: tuple[object, ...]) -> str | None:
        if event == "exec" and type(args[0]) is code_type and loaded_by_the_import_system(args[0]):
            trust(args[0])
        if event in events and asked_by_tests(event):
            return None
        if event in events or event.startswith("ctypes."):
            return event
        if event == "open":
            path, mode, flags = (*args, None, None)[:3]
            try:
                named = paths(path)
            except TypeError as err:
                return f"open of {err}"
            if any(proc(p) for p in named):
                return f"open {named[0]}"
            writes = flags & write_flags if isinstance(flags, int) and flags >= 0 else (
                isinstance(mode, str) and any(c in mode for c in "wax+")
            )  # fmt: skip
            if writes and protected.intersection(named):
                return f"write {named[0]}"
            reads = not writes and test_sources.intersection(named)
            if reads and (thread() != main or asked_by_workspace()):
                return f"read {named[0]}"
        elif event in path_events:
            for arg in args[: path_events[event]]:
                if isinstance(arg, str | bytes) and protected.intersection(paths(arg)):
                    return f"{event} {fsdecode(arg)}"
        elif event in child_events:
            if not collected[0] and (thread() != main or asked_by_workspace()):
                return f"{event} while the tests are collected"
            if confined[0] and readable(confined[0]):
                # a thread started before confinement (or started by one), not confined
                return f"{event} from a thread that can read the tests"
        return None

    def hook(event: str, args: tuple[object, ...]) -> None:
        if event == "fleetrl.grader.start":
            switch[0] = True
        elif event == "fleetrl.grader.blocked" and type(args[0]) is list:
            args[0].extend(blocked)
        if not switch[0]:
            return
        reason = refusal(event, args)
        if reason is not None:
            blocked.append(reason)
            emit({"kind": "blocked", "event": reason})
            raise RuntimeError(f"refused by the grader: {reason}")

    def confine(modules: list[str]) -> None:
        # Once, from the main thread. The threads running by now keep their access: the
        # hook asks whether the thread starting a program can still read a test module.
        if collected[0] or thread() != main:
            emit({"kind": "blocked", "event": "confinement asked twice or off the main thread"})
            return
        conftests = [p for p in test_sources if p.endswith("/conftest.py")]
        hidden = [realpath(p) for p in [*modules, *conftests]]
        if hidden and restrict(hidden):
            confined[0] = os.fsencode(hidden[0])
        collected[0] = True

    sys.addaudithook(hook)
    return confine


def _tests_may_context() -> tuple[frozenset[str], tuple[Any, Any, Any], Any, type]:
    """What `asked_by_tests` compares with, bound before any agent code runs: the events,
    the code of the loaders that execute a module read from its file (pytest's rewriting
    hook; importlib's, which calls exec through `_call_with_frames_removed`), the doctest
    runner's `run` and the code type."""
    import doctest
    import importlib._bootstrap
    import importlib._bootstrap_external

    from _pytest.assertion.rewrite import AssertionRewritingHook

    loaders = (
        AssertionRewritingHook.exec_module.__code__,
        importlib._bootstrap._call_with_frames_removed.__code__,
        importlib._bootstrap_external._LoaderBasics.exec_module.__code__,
    )
    return (
        _TESTS_MAY,
        loaders,
        doctest.DocTestRunner.run.__code__,
        type(_tests_may_context.__code__),
    )


def _landlock() -> tuple[Callable[[list[str]], bool], Callable[[bytes], bool]]:
    """`restrict(files)` keeps the calling thread, and every thread and process it starts
    later, from opening `files` for reading, every other file staying readable; it changes
    nothing where the kernel has no Landlock or a grant cannot be made, and says whether it
    confined. `readable(path)` says whether the calling thread can open `path`, without an
    audit event. Both are made here, before the audit hook is on: ctypes raises events
    (building buffers, finding symbols) that the hook refuses; calling a function does not."""
    import ctypes
    import struct

    libc = ctypes.CDLL(None)
    syscall, prctl, open_file, close = libc.syscall, libc.prctl, libc.open, libc.close
    pack_into, read_only = struct.pack_into, os.O_RDONLY | os.O_CLOEXEC
    handled = ctypes.create_string_buffer(struct.pack("=Q", _LANDLOCK_READ_FILE), 8)
    size, rule = ctypes.c_size_t(8), ctypes.create_string_buffer(12)  # __packed__ {u64, s32}
    listdir, join, dirname = os.listdir, os.path.join, os.path.dirname
    open_path = os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC

    def readable_around(hidden: set[str]) -> list[str]:
        # Rules only grant: grant every entry of the hidden files' folders and of those
        # folders' parents, except the hidden files and the way down to them.
        ancestors = {"/"}
        for path in hidden:
            while path != "/":
                path = dirname(path)
                ancestors.add(path)
        withheld = ancestors | hidden
        return [
            join(folder, name)
            for folder in ancestors
            for name in listdir(folder)
            if join(folder, name) not in withheld
        ]

    def restrict(files: list[str]) -> bool:
        ruleset = syscall(_SYS_CREATE_RULESET, handled, size, 0)
        if ruleset < 0:
            return False
        try:
            for path in readable_around(set(files)):
                fd = os.open(path, open_path)
                try:
                    pack_into("=Qi", rule, 0, _LANDLOCK_READ_FILE, fd)
                    if syscall(_SYS_ADD_RULE, ruleset, _LANDLOCK_RULE_PATH_BENEATH, rule, 0):
                        return False  # a grant missing would refuse honest reads
                finally:
                    os.close(fd)
            if prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                return False
            return syscall(_SYS_RESTRICT_SELF, ruleset, 0) == 0
        except OSError:
            return False  # an entry that cannot be listed or opened: the same
        finally:
            os.close(ruleset)

    def readable(path: bytes) -> bool:
        fd = open_file(path, read_only)
        if fd >= 0:
            close(fd)
        return fd >= 0

    return restrict, readable


def _guard_exit(emit: Emit, leave: Callable[[int], Any]) -> None:
    """Make `os._exit` in this process a reported tampering that ends it with TAMPERED_EXIT;
    forked children (multiprocessing's end with `os._exit`) exit as asked, without the
    report channel."""
    import posix

    runner, getpid = os.getpid(), os.getpid

    def guarded_exit(status: int) -> None:
        if getpid() == runner:
            emit({"kind": "blocked", "event": "os._exit"})
            leave(TAMPERED_EXIT)
        leave(status)

    os._exit = posix._exit = guarded_exit


def _audit_fork_exec() -> None:
    """Make `_posixsubprocess.fork_exec` raise an audit event: multiprocessing's spawn and
    forkserver start their interpreters through it directly, where `subprocess` raises
    `subprocess.Popen` first."""
    import _posixsubprocess

    fork_exec, audit = _posixsubprocess.fork_exec, sys.audit

    def audited_fork_exec(*args: Any) -> int:
        audit("_posixsubprocess.fork_exec", args[0] if args else None)
        return fork_exec(*args)

    _posixsubprocess.fork_exec = audited_fork_exec


def _audit_open_at() -> None:
    """Make `os.open` with `dir_fd` raise its `open` event for the path it opens: the
    interpreter's own event names only the part relative to the descriptor, which the hook
    would take as relative to the working directory, not to the folder the descriptor holds."""
    import posix

    open_at, audit, fspath, fsdecode, readlink, join = (
        posix.open, sys.audit, os.fspath, os.fsdecode, os.readlink, os.path.join,
    )  # fmt: skip

    def audited_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        path = fspath(path)  # once: a path-like could answer the event and the open apart
        if dir_fd is not None:
            try:
                folder = readlink(f"/proc/self/fd/{dir_fd}")
            except (OSError, TypeError):
                folder = None  # not a descriptor: the open below fails as it would have
            if folder is not None:
                audit("open", join(folder, fsdecode(path)), None, flags)
        return open_at(path, flags, mode, dir_fd=dir_fd)

    os.open = posix.open = audited_open


def _bindings() -> dict[tuple[str, str], object]:
    """(owner, name) -> the callable bound there, for every watched module and the classes
    defined in them."""
    out: dict[tuple[str, str], object] = {}
    for modname, module in list(sys.modules.items()):
        if not (modname in _WATCHED or modname.startswith(_WATCHED_PREFIXES)):
            continue
        for name, value in list(vars(module).items()):
            if callable(value):
                out[modname, name] = value
            if isinstance(value, type) and value.__module__ == modname:
                for attr, member in list(vars(value).items()):
                    out[f"{modname}.{name}", attr] = member
    return out


class _ReportPlugin:
    """The report plugin, passed to pytest as an object: there is no module name to shadow."""

    def __init__(
        self,
        emit: Emit,
        rootdir: str,
        sha256: Callable[[bytes], Any],
        confine: Callable[[list[str]], None],
    ) -> None:
        self.emit, self.rootdir, self.sha256, self.confine = emit, rootdir, sha256, confine
        self.hooks = (sys.gettrace, sys.getprofile)
        self.no_hooks = (sys.gettrace(), sys.getprofile())
        self.test_modules: list[str] = []
        self.plugins: set[int] = set()
        self.importers: list[object] = []
        self.modules: set[int] = set()
        self.pm: Any = None
        self.failed_subtests: set[str] = set()
        self.subtest_report: Any = None
        try:  # pytest >= 9 runs subtests
            from _pytest.subtests import SubtestReport

            self.subtest_report = SubtestReport
        except ImportError:
            pass

    @pytest.hookimpl(tryfirst=True)
    def pytest_load_initial_conftests(self) -> None:
        """Put the folders the `pythonpath` setting added in front behind everything else,
        before any conftest (or the agent's code it imports) is loaded."""
        inside = [p for p in sys.path if p == self.rootdir or p.startswith(self.rootdir + "/")]
        sys.path[:] = [p for p in sys.path if p not in inside] + inside

    def pytest_collection(self, session: Any) -> None:
        """Remember the plugins and import hooks in place before any test module is
        imported (pytest's assertion rewriter is installed by then)."""
        self.pm = session.config.pluginmanager
        self.plugins = {id(p) for p in self.pm.get_plugins()}
        self.importers = [*sys.meta_path, None, *sys.path_hooks]

    def pytest_collectstart(self, collector: Any) -> None:
        """Hash each test module's bytes right before pytest imports it, and check that no
        import hook was added since collection started."""
        if type(collector).__name__ not in ("Module", "DoctestModule"):
            return
        with open(collector.path, "rb") as f:
            digest = self.sha256(f.read()).hexdigest()
        path = os.path.relpath(collector.path, self.rootdir)
        self.emit({"kind": "collected", "path": path, "sha256": digest})
        self.test_modules.append(str(collector.path))
        importers = [*sys.meta_path, None, *sys.path_hooks]
        if len(importers) != len(self.importers) or any(
            a is not b for a, b in zip(importers, self.importers, strict=True)
        ):
            self.emit({"kind": "blocked", "event": "import hooks changed"})

    def pytest_collection_finish(self) -> None:
        """Every test module is imported: from now on no process can read one."""
        self.confine(self.test_modules)

    def pytest_itemcollected(self, item: Any) -> None:
        """Check that each test's module was imported from its file (a package or a planted
        module named like the test module would be imported in its place)."""
        module = getattr(item, "module", None)
        if module is None or id(module) in self.modules:
            return
        self.modules.add(id(module))
        origin = getattr(vars(module).get("__spec__"), "origin", None)
        if origin != str(item.path):
            path = os.path.relpath(item.path, self.rootdir)
            self.emit({"kind": "blocked", "event": f"{path} imported from {origin}"})

    def pytest_runtest_logreport(self, report: Any) -> None:
        """One record per test phase (setup, call, teardown). A subtest (pytest 9 reports
        each, under its test's id) is no phase: one that failed fails its test's call."""
        if self.subtest_report is not None and isinstance(report, self.subtest_report):
            if report.failed:
                self.failed_subtests.add(report.nodeid)
            return
        outcome = report.outcome
        if report.when == "call" and report.nodeid in self.failed_subtests:
            outcome = "failed"
        record = {"nodeid": report.nodeid, "when": report.when, "outcome": outcome}
        self.emit({"kind": "report", **record})
        if report.when == "teardown" and tuple(get() for get in self.hooks) != self.no_hooks:
            # The tests may trace and profile, and stop: what outlives a test may have been
            # installed by no test (a finalizer calling sys.settrace from a test's frame).
            event = f"a trace or profile function outlived {report.nodeid}"
            self.emit({"kind": "blocked", "event": event})

    def new_plugins(self) -> list[str]:
        """Plugins registered during the run that are not conftest files."""
        if self.pm is None:
            return []
        conftests = {id(p) for p in self.pm._conftest_plugins}
        return [
            self.pm.get_name(p) or type(p).__name__
            for p in self.pm.get_plugins()
            if id(p) not in self.plugins and id(p) not in conftests
        ]


def main(spec: dict[str, object], tests: list[str]) -> None:
    """Run pytest on `tests` as `spec` says and report on the private channel; never
    returns."""
    report_fd = os.dup(1)
    os.dup2(2, 1)
    emit, leave, sha256 = _reporter(report_fd), os._exit, hashlib.sha256
    rootdir = str(spec["rootdir"])
    protected = frozenset(os.path.join(rootdir, str(p)) for p in spec["protected"])  # type: ignore[attr-defined]
    import ctypes
    import pathlib

    from _pytest._py.path import LocalPath

    # Not dumpable: other processes (the tests' children, all of the same uid) need
    # CAP_SYS_PTRACE, which the sandbox drops, to open this one's /proc/<pid>/mem or fd/.
    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)

    safe = frozenset({pathlib.PurePath.__fspath__, LocalPath.__fspath__})
    confine = _install_audit_hook(emit, protected, safe, rootdir)
    os.register_at_fork(after_in_child=lambda: os.close(report_fd))
    _guard_exit(emit, leave)
    _audit_fork_exec()
    _audit_open_at()
    sys.path.append(rootdir)
    args = ["-q", "-p", "no:cacheprovider", "--import-mode=append", f"--rootdir={rootdir}"]
    args += [f"--confcutdir={rootdir}", "-c", str(spec["config"]), "--", *tests]
    plugin = _ReportPlugin(emit, rootdir, sha256, confine)
    before = _bindings()
    sys.audit("fleetrl.grader.start")
    code = int(pytest.main(args, plugins=[plugin]))
    after = _bindings()
    blocked: list[str] = []
    sys.audit("fleetrl.grader.blocked", blocked)
    blocked += [f"rebound {o}.{n}" for (o, n), v in before.items() if after.get((o, n)) is not v]
    blocked += [f"registered plugin {name}" for name in plugin.new_plugins()]
    emit({"kind": "final", "exit": code, "blocked": blocked})
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    leave(code)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]), sys.argv[2:])
