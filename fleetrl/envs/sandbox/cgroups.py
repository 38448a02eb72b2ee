"""Per-command cgroups (v1 `pids` + `memory`): the limits root cannot escape.

RLIMIT_NPROC does not bind root, and sandboxed commands run as root inside their user
namespace, so process count and memory are bounded by cgroups instead. Each command gets
a fresh pair of groups, created as children of the caller's own groups (so they also
count against whatever limits the caller lives under):

    /sys/fs/cgroup/pids/<caller's group>/fleetrl-<owner>-<sandbox id>-<n>    pids.max
    /sys/fs/cgroup/memory/<caller's group>/fleetrl-<owner>-<sandbox id>-<n>  memory.limit_in_bytes

The command joins both before bwrap starts (see `JOIN_AND_EXEC`), so every process it
ever forks is counted. After the command, the groups are emptied (SIGKILL) and removed.
<owner> is the creating process's pid and start time: `cleanup_stale` removes the groups
of owners that died mid-command (their commands died with them: bwrap --die-with-parent).

Not covered: cgroup v2-only hosts (controllers in the unified hierarchy); CPU shares.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from functools import cache

from fleetrl.envs.sandbox.types import Limits, SandboxUnavailable

_CGROUP_FS = "/sys/fs/cgroup"
_CONTROLLERS = ("pids", "memory")

# Run by /bin/sh before bwrap: move this very process into the command's groups, then
# become bwrap. Doing it in the child (not after spawning) leaves no window in which a
# fork could escape the limits. Stdin (the sandbox's namespace, see `mounts`) is closed.
JOIN_AND_EXEC = 'echo $$ > "$1" && echo $$ > "$2" && shift 2 && exec "$@" </dev/null'


def _start_time(pid: int) -> int | None:
    """Kernel start time of `pid` (clock ticks since boot); None if no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces or ')', so split after its last ')'.
    return int(stat[stat.rindex(b")") + 2 :].split()[19])


def owner_tag() -> str:
    """This process as "<pid>.<start time>": unique even when pids are reused."""
    return f"{os.getpid()}.{_start_time(os.getpid())}"


@cache
def cgroup_parents() -> tuple[str, str]:
    """This process's own pids and memory cgroup directories (v1), or SandboxUnavailable."""
    own: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for controller in controllers.split(","):
                own[controller] = path
    parents = []
    for controller in _CONTROLLERS:
        directory = os.path.join(_CGROUP_FS, controller) + own.get(controller, "/").rstrip("/")
        if controller not in own or not os.access(directory, os.W_OK):
            raise SandboxUnavailable(
                f"the bwrap backend needs a writable cgroup v1 '{controller}' hierarchy "
                f"(looked for {directory}); cgroup v2-only hosts are not supported yet"
            )
        parents.append(directory)
    return parents[0], parents[1]


class CommandCgroup:
    """The pids + memory groups of one command; create, join (by argv), kill, remove."""

    def __init__(self, name: str, limits: Limits) -> None:
        tag = f"fleetrl-{owner_tag()}-{name}"
        self.dirs = [os.path.join(parent, tag) for parent in cgroup_parents()]
        pids_dir, memory_dir = self.dirs
        for directory in self.dirs:
            os.mkdir(directory)
        try:
            _write(pids_dir, "pids.max", str(limits.max_procs))
            limit = str(limits.memory_mb << 20)
            _write(memory_dir, "memory.limit_in_bytes", limit)
            # With swap on the host, memory+swap must be capped too or the limit leaks.
            if os.path.exists(os.path.join(memory_dir, "memory.memsw.limit_in_bytes")):
                _write(memory_dir, "memory.memsw.limit_in_bytes", limit)
        except BaseException:
            self.remove()
            raise

    @property
    def procs_files(self) -> list[str]:
        """The two `cgroup.procs` files `JOIN_AND_EXEC` takes as its first arguments."""
        return [os.path.join(d, "cgroup.procs") for d in self.dirs]

    def oom_killed(self) -> bool:
        """True if the kernel OOM-killed a process of this group."""
        with open(os.path.join(self.dirs[1], "memory.oom_control")) as f:
            for line in f:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
        return False

    def kill_all(self, timeout: float = 5.0) -> None:
        """SIGKILL every process in the group until it stays empty."""
        _kill_group(self.dirs[0], timeout)

    def remove(self) -> None:
        """Kill what is left and remove both groups (idempotent)."""
        for directory in self.dirs:
            if os.path.isdir(directory):
                _kill_group(directory, 5.0)
                _rmdir_retrying(directory)


def _write(directory: str, name: str, value: str) -> None:
    with open(os.path.join(directory, name), "w") as f:
        f.write(value)


def _kill_group(directory: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(os.path.join(directory, "cgroup.procs")) as f:
                pids = [int(line) for line in f if line.strip()]
        except FileNotFoundError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.001)


def _rmdir_retrying(directory: str) -> None:
    # A killed process leaves the group only once the kernel has fully reaped it.
    for _ in range(200):
        try:
            os.rmdir(directory)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.005)
    os.rmdir(directory)


def cleanup_stale() -> int:
    """Remove the command groups of sandbox owners that died; returns how many.

    Safe while other processes run sandboxes: only groups whose owner (pid and start
    time in the name) no longer exists are touched. Scans both hierarchies whole, since
    a dead owner may have lived in another group than ours.
    """
    removed = 0
    for controller in _CONTROLLERS:
        for dirpath, dirnames, _ in os.walk(os.path.join(_CGROUP_FS, controller)):
            for name in list(dirnames):
                if not name.startswith("fleetrl-"):
                    continue
                dirnames.remove(name)
                pid, _, start = name.split("-")[1].partition(".")
                if not pid.isdigit() or str(_start_time(int(pid))) == start:
                    continue
                directory = os.path.join(dirpath, name)
                _kill_group(directory, 5.0)
                with contextlib.suppress(OSError):
                    _rmdir_retrying(directory)
                    removed += 1
    return removed
