"""The production backend: bubblewrap namespaces over an overlay of the base directory.

One sandbox = one private mount namespace holding an overlay (see `mounts`); each `exec`
starts a fresh bwrap in it:

    python ─▶ nsenter (into the sandbox's mount namespace)
              ─▶ sh (joins the command's cgroups, see `cgroups`)
                 ─▶ bwrap ─▶ pid 1 ─▶ bash -c cmd     (new user, pid, net, ipc, uts and
                                                       cgroup namespaces; all one pid
                                                       until bwrap forks)

What a command sees and may do:
- /workspace: the overlay (read-write, also the cwd); /tmp: the sandbox's own tmpfs; both
  persist across commands. Writes land in the tmpfs, never in the base or on the host.
- Read-only: /usr (with the /bin, /lib, ... symlinks), a copy of the harmless /etc
  entries (no passwd/shadow of the host, no package-manager credentials), the Python
  prefixes (`sys.prefix`, `sys.base_prefix`) at their host paths so tasks run pytest. The
  root itself is a read-only tmpfs; nothing else of the host exists inside.
- Never fleetrl itself: where the package lies under a mounted folder (installed into
  site-packages rather than editable), an empty read-only folder covers it, so code in a
  sandbox cannot import the bundled suites and rebuild a task's hidden tests.
- No network: a new network namespace holds only its own loopback.
- Its own PID namespace: no host process is visible; when the command exits, every
  process it left behind is killed with the namespace.
- uid 0 inside a user namespace with every capability dropped and nested user namespaces
  disabled. That uid is root's on the host too, so /proc is read-only (global sysctls
  check the uid, not capabilities) and processes and memory are bounded by per-command
  cgroups (RLIMIT_NPROC does not bind root); wall time by a SIGKILL.

Contract: root on a Linux host with bubblewrap (>= 0.8), nsenter, overlayfs and cgroup v1
pids + memory. Not covered: seccomp filtering, CPU quotas, disk I/O bandwidth.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import subprocess
import sys
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path

from fleetrl.envs.sandbox import changes, fs
from fleetrl.envs.sandbox.base import Sandbox, command_argv
from fleetrl.envs.sandbox.cgroups import JOIN_AND_EXEC, CommandCgroup, cgroup_parents, cleanup_stale
from fleetrl.envs.sandbox.mounts import SandboxMounts, prepare_root, sandbox_root
from fleetrl.envs.sandbox.process import run_captured
from fleetrl.envs.sandbox.types import Change, ExecResult, Limits, SandboxError, SandboxUnavailable

WORKDIR = "/workspace"


@cache
def host_tools() -> tuple[str, str]:
    """Paths of bwrap ($FLEETRL_BWRAP overrides) and nsenter, or SandboxUnavailable."""
    bwrap = os.environ.get("FLEETRL_BWRAP") or shutil.which("bwrap") or "bwrap"
    if not os.access(bwrap, os.X_OK):
        raise SandboxUnavailable(
            f"bubblewrap not found ({bwrap}): install it with scripts/setup-system.sh "
            "(Debian package 'bubblewrap'); backend='local' runs without isolation, "
            "for development only, and must be asked for by name"
        )
    nsenter = shutil.which("nsenter")
    if nsenter is None:
        raise SandboxUnavailable("nsenter not found (Debian package 'util-linux')")
    if os.geteuid() != 0:
        raise SandboxUnavailable("the bwrap backend mounts overlays and must run as root")
    with open("/proc/filesystems") as f:
        if "overlay" not in f.read():
            raise SandboxUnavailable("the kernel has no overlayfs (modprobe overlay)")
    cgroup_parents()
    return bwrap, nsenter


@cache
def _prepared(root: str) -> str:
    """Once per process and root: the shared files, then leftovers of crashed owners."""
    try:
        etc = prepare_root(root)
    except OSError as err:
        raise SandboxUnavailable(f"cannot prepare the sandbox root: {err}") from err
    cleanup_stale()
    return etc


PACKAGE_DIR = str(Path(__file__).resolve().parents[2])  # fleetrl/, as installed


def default_ro_paths() -> list[str]:
    """The interpreter prefixes commands need to run this Python (venv and its base)."""
    paths = []
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        if not (prefix == "/usr" or prefix.startswith("/usr/")):
            paths.append(prefix)
    return paths


def _bwrap_args(mnt: str, etc: str, limits: Limits, ro_paths: Sequence[str]) -> list[str]:
    args = [
        "--unshare-user", "--uid", "0", "--gid", "0", "--disable-userns",
        "--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup",
        "--hostname", "sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--clearenv", "--ro-bind", "/usr", "/usr", "--ro-bind", etc, "/etc",
    ]  # fmt: skip
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = f"/{top}"
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), host]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, host]
    # /proc read-only: global sysctls (vm.*, kernel.core_pattern) check the uid, not
    # capabilities, and the command's uid is root's; bwrap leaves /proc/sys writable.
    args += ["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev"]
    args += ["--size", str(limits.disk_mb << 20), "--tmpfs", "/dev/shm"]
    args += ["--bind", f"{mnt}/merged", WORKDIR, "--bind", f"{mnt}/tmp", "/tmp"]
    for path in ro_paths:
        args += ["--ro-bind", path, path]
    for cover in _views_of(PACKAGE_DIR, ["/usr", *ro_paths]):
        args += ["--tmpfs", cover, "--remount-ro", cover]
    return [*args, "--chdir", WORKDIR, "--remount-ro", "/"]


def _views_of(path: str, mounted: Sequence[str]) -> list[str]:
    """Where `path` (resolved) shows inside the sandbox through the `mounted` folders."""
    views = []
    for folder in mounted:
        real = os.path.realpath(folder)
        if os.path.commonpath([path, real]) == real:
            views.append(os.path.join(folder, os.path.relpath(path, real)))
    return sorted(set(views))


_self_tested = threading.Event()


class BwrapSandbox(Sandbox):
    """A bubblewrap sandbox over an overlay of `base_dir` (see the module docstring)."""

    backend = "bwrap"
    isolated = True
    workdir = WORKDIR

    def __init__(
        self, base_dir: str, limits: Limits, ro_paths: Sequence[str] | None = None
    ) -> None:
        bwrap, nsenter = host_tools()
        if any(c in base_dir for c in ",:\\"):
            raise SandboxError(f"base_dir may not contain ',', ':' or '\\' (overlay): {base_dir}")
        self.base_dir = base_dir
        self.limits = limits
        self.id = secrets.token_hex(6)
        root = sandbox_root()
        etc = _prepared(root)
        try:
            self._mounts = SandboxMounts(root, base_dir, limits.disk_mb)
        except OSError as err:
            raise SandboxError(f"could not create a sandbox over {base_dir}: {err}") from err
        self._finalizer = weakref.finalize(self, self._mounts.close)
        paths = default_ro_paths() if ro_paths is None else list(ro_paths)
        self._prefix = [nsenter, "--mount=/proc/self/fd/0", "--", "/bin/sh", "-c", JOIN_AND_EXEC]
        self._bwrap = [bwrap, *_bwrap_args(self._mounts.mnt, etc, limits, paths)]
        self._env = {
            "PATH": ":".join([*(f"{p}/bin" for p in paths), "/usr/local/bin:/usr/bin:/bin"]),
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "LANG": "C.UTF-8",
            "TERM": "dumb",
            "USER": "root",
            # An edit that keeps a file's size within the second of its cached bytecode
            # would otherwise run the stale .pyc: agents edit and re-test that fast.
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._running: set[subprocess.Popen[bytes]] = set()
        self._seq = itertools.count()
        self._closed = False
        if not _self_tested.is_set():
            self._self_test()

    def _self_test(self) -> None:
        """Run one trivial command, once per process, so a host where bwrap cannot set up
        its mounts fails here with bwrap's message, not later as a command's exit 1."""
        result = self.exec(["/bin/true"], timeout=30)
        if result.exit_code != 0:
            self.close()
            raise SandboxUnavailable(f"bwrap cannot start a sandbox here: {result.stderr.strip()}")
        _self_tested.set()

    @contextlib.contextmanager
    def _hold(self) -> Iterator[int]:
        """A private duplicate of the namespace's tmpfs descriptor, for one operation: a
        concurrent close() cannot pull it away (or let the number be reused) meanwhile."""
        with self._lock:
            if self._closed:
                raise SandboxError(f"sandbox {self.id} is closed")
            fd = os.dup(self._mounts.rw_fd)
        try:
            yield fd
        finally:
            os.close(fd)

    def exec(
        self,
        cmd: str | Sequence[str],
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        *,
        pass_fds: Sequence[int] = (),
        read_only: bool = False,
    ) -> ExecResult:
        """Run `cmd` in a fresh bwrap over the workspace (see `Sandbox.exec`); with
        `read_only` the command sees the workspace read-only (the verifier's test run).
        `pass_fds` reach the command as they do `--info-fd`: nsenter, sh and bwrap keep
        the descriptors they inherit."""
        argv = command_argv(cmd, timeout)
        env_args: list[str] = []
        for key, value in {**self._env, **(env or {})}.items():
            if not key or "=" in key or "\0" in key + value:
                raise ValueError(f"invalid environment variable name or value: {key!r}")
            env_args += ["--setenv", key, value]
        with self._lock:
            if self._closed:
                raise SandboxError(f"sandbox {self.id} is closed")
            name = f"{self.id}-{next(self._seq)}"
            ns_fd = os.dup(self._mounts.ns_fd)
        try:
            group = CommandCgroup(name, self.limits)
        except OSError as err:
            os.close(ns_fd)
            raise SandboxError(f"cannot create the command's cgroups: {err}") from err
        info_r, info_w = os.pipe()
        try:
            full = [*self._prefix, "sh", *group.procs_files, *self._bwrap]
            full += ["--remount-ro", WORKDIR] if read_only else []
            full += ["--info-fd", str(info_w), *env_args, "--", *argv]
            result = run_captured(
                full,
                timeout=self.limits.wall_s if timeout is None else timeout,
                max_output_bytes=self.limits.max_output_bytes,
                kill=lambda proc: _kill(proc, group),
                env={},
                stdin=ns_fd,
                pass_fds=(info_w, *pass_fds),
                on_start=self._started,
            )
            result.oom_killed = group.oom_killed()
            os.close(info_w)
            info_w = -1
            started = os.read(info_r, 4096)
        finally:
            for fd in (info_w, info_r, ns_fd):
                if fd >= 0:
                    os.close(fd)
            group.remove()
            self._finished()
        # bwrap writes its info once it has created the namespaces: without it, bwrap
        # itself failed (e.g. namespaces not permitted), not the command. Failures later in
        # bwrap's setup are caught by the self-test of the first sandbox of the process.
        if not started and not result.timed_out and not self._closed:
            raise SandboxError(f"bwrap failed to start the sandbox: {result.stderr.strip()}")
        return result

    def _started(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._running.add(proc)
            if self._closed:  # close() ran while this command was starting
                proc.kill()

    def _finished(self) -> None:
        with self._lock:
            self._running = {p for p in self._running if p.poll() is None}
            self._idle.notify_all()

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        """Bytes of a workspace file, read on the host without leaving the workspace."""
        with self._hold() as fd:
            return fs.read_beneath(_merged(fd), fs.relative_path(path, WORKDIR), max_bytes)

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        """Write a workspace file on the host (through the overlay, never outside it)."""
        payload = data.encode() if isinstance(data, str) else data
        with self._hold() as fd:
            fs.write_beneath(_merged(fd), fs.relative_path(path, WORKDIR), payload, mode)

    def list_dir(self, path: str = ".") -> list[str]:
        """Entries of a workspace directory (see `Sandbox.list_dir`)."""
        with self._hold() as fd:
            return fs.list_beneath(_merged(fd), fs.relative_path(path, WORKDIR))

    def changes(self) -> list[Change]:
        """Changed files, found from the overlay's upper layer (cost ~ size of the change)."""
        with self._hold() as fd:
            candidates = changes.upper_candidates(f"/proc/self/fd/{fd}/upper", self.base_dir)
            return changes.compute_changes(self.base_dir, _merged(fd), candidates)

    def diff(self, paths: Iterable[str] | None = None) -> str:
        """Git-style patch of the workspace vs the base (see `changes`)."""
        with self._hold() as fd:
            candidates = list(changes.upper_candidates(f"/proc/self/fd/{fd}/upper", self.base_dir))
            if paths is not None:
                wanted = {fs.relative_path(p, WORKDIR) for p in paths}
                candidates = [c for c in candidates if c in wanted]
            return changes.unified_diff(self.base_dir, _merged(fd), candidates)

    def close(self) -> None:
        """Kill running commands, then release the namespace (idempotent); the kernel
        unmounts the overlay and frees the tmpfs once the last command is gone."""
        with self._lock:
            self._closed = True
            for proc in self._running:
                proc.kill()  # a no-op for a process already reaped
            self._idle.wait_for(lambda: not self._running, timeout=30)
        self._finalizer()


def _merged(rw_fd: int) -> str:
    # The path crosses from the tmpfs root into the overlay mounted on it, in the
    # sandbox's namespace; see `mounts`.
    return f"/proc/self/fd/{rw_fd}/merged"


def _kill(proc: subprocess.Popen[bytes], group: CommandCgroup) -> None:
    """End a command: SIGKILL to bwrap takes its PID namespace down (--die-with-parent);
    the cgroup sweep catches anything still starting up."""
    proc.kill()
    group.kill_all()
