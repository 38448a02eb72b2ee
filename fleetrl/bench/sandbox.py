"""`fleetrl bench sandbox`: how fast sandboxes start, how many fit, what each costs.

Phases, all over one synthetic repository (or `base_dir`):

1. latency: `n` times, create a sandbox and run a first command (`echo ready`); the time
   from the create call to the command's result is the create-to-first-command latency
   (p50/p99). A second command in the same sandbox gives the warm `exec` latency.
2. pool: `acquire()` from a full `SandboxPool` to the first command's result (p50).
3. burst: `burst` threads each create a sandbox and run a first command at once; the
   time until the last one is ready.
4. peak: sandboxes are opened one by one, each running a live command (`sleep`), until
   `max_concurrent` or the first failure; memory per sandbox is the drop in the host's
   MemAvailable divided by their number (processes, namespaces, mounts, everything; noisy
   when other work runs), cross-checked by what their memory cgroups were charged.

Anchors (FIELD_NOTES): Firecracker ~125 ms boot; hosted sandboxes 0.1-2.7 s to a first
command; bwrap over an overlay ~11 ms on this machine. Goal: p50 <= 25 ms.
"""

from __future__ import annotations

import contextlib
import glob
import os
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

from rich.progress import Progress

from fleetrl.envs.sandbox import Sandbox, SandboxPool, open_sandbox
from fleetrl.envs.sandbox.bwrap import BwrapSandbox
from fleetrl.envs.sandbox.cgroups import cgroup_parents
from fleetrl.envs.sandbox.types import Limits


def make_synthetic_repo(root: str, files: int = 1000, file_kb: int = 4) -> str:
    """A Python-package-shaped tree of `files` files of `file_kb` KiB under `root/repo`."""
    repo = os.path.join(root, "repo")
    line = "def f(x):\n    return x + 1  # padding padding padding padding padding\n"
    body = line * (file_kb * 1024 // len(line))
    for i in range(files):
        directory = os.path.join(repo, f"pkg{i // 50}")
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, f"mod{i}.py"), "w") as f:
            f.write(body)
    return repo


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def _mem_available_mb() -> float:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no MemAvailable in /proc/meminfo")


def _first_command(opener: Callable[[], Sandbox]) -> tuple[Sandbox, float]:
    start = time.perf_counter()
    sandbox = opener()
    result = sandbox.exec("echo ready")
    if result.stdout != "ready\n":
        sandbox.close()
        raise RuntimeError(f"first command failed: {result}")
    return sandbox, time.perf_counter() - start


@contextlib.contextmanager
def _phase(progress: Progress | None, name: str, total: int) -> Iterator[Callable[[], None]]:
    if progress is None:
        yield lambda: None
        return
    task = progress.add_task(name, total=total)
    yield lambda: progress.advance(task)


def _peak(base: str, backend: str, limits: Limits, cap: int, tick: Callable[[], None]) -> dict:
    """Open sandboxes each running `sleep` until `cap` or a failure; measure memory."""
    sandboxes: list[Sandbox] = []
    threads: list[threading.Thread] = []
    before = _mem_available_mb()
    error = ""
    try:
        for _ in range(cap):
            try:
                sandbox = open_sandbox(base, backend, limits)
            except Exception as err:
                error = str(err)
                break
            sandboxes.append(sandbox)
            # The command marks itself started in the workspace, then stays alive.
            cmd = "touch .started && exec sleep 600"
            thread = threading.Thread(target=sandbox.exec, args=(cmd,), daemon=True)
            thread.start()
            threads.append(thread)
            deadline = time.monotonic() + 10
            while ".started" not in sandbox.list_dir() and thread.is_alive():
                if time.monotonic() > deadline:
                    break
                time.sleep(0.001)
            if not thread.is_alive() or ".started" not in sandbox.list_dir():
                error = "a live command did not start"
                sandboxes.pop().close()
                break
            tick()
        time.sleep(0.5)  # let the kernel settle its accounting
        used = before - _mem_available_mb()
        charged = sum(_charged_mb(sandbox) for sandbox in sandboxes)
    finally:
        for sandbox in sandboxes:
            sandbox.close()
        for thread in threads:
            thread.join(timeout=30)
    count = len(sandboxes)
    figures = {"peak_concurrent": count, "peak_cap": cap, "peak_stopped_by": error or "cap"}
    return figures | memory_figures(used, charged, count)


def memory_figures(used_mb: float, charged_mb: float, count: int) -> dict:
    """Memory per sandbox, from the drop in the host's available memory (`used_mb`) and
    from the cgroups' own accounting (`charged_mb`), over `count` sandboxes. A drop below
    zero (other processes freed more than the few sandboxes took) measured nothing: it is
    reported as None with a note, never as a negative size."""
    if not count:
        return {"memory_per_sandbox_mb": None, "cgroup_memory_per_sandbox_mb": None}
    figures: dict = {
        "memory_per_sandbox_mb": round(used_mb / count, 2),
        "cgroup_memory_per_sandbox_mb": round(charged_mb / count, 2),
    }
    if used_mb < 0:
        figures["memory_per_sandbox_mb"] = None
        figures["memory_note"] = (
            "host memory noise exceeded the sandboxes' use (too few of them); "
            "see cgroup_memory_per_sandbox_mb"
        )
    return figures


def _charged_mb(sandbox: Sandbox) -> float:
    """Memory charged to the sandbox's live command groups (its processes' own pages and
    kernel objects; bwrap only, 0 for other backends)."""
    if not isinstance(sandbox, BwrapSandbox):
        return 0.0
    total = 0
    for directory in glob.glob(os.path.join(cgroup_parents()[1], f"fleetrl-*-{sandbox.id}-*")):
        with open(os.path.join(directory, "memory.usage_in_bytes")) as f:
            total += int(f.read())
    return total / 2**20


def _latency(opener: Callable[[], Sandbox], n: int, tick: Callable[[], None]) -> dict:
    first, warm = [], []
    for _ in range(n):
        sandbox, seconds = _first_command(opener)
        first.append(seconds * 1000)
        start = time.perf_counter()
        sandbox.exec("true")
        warm.append((time.perf_counter() - start) * 1000)
        sandbox.close()
        tick()
    return {
        "p50_ms": round(statistics.median(first), 2),
        "p99_ms": round(_percentile(first, 0.99), 2),
        "max_ms": round(max(first), 2),
        "exec_p50_ms": round(statistics.median(warm), 2),
    }


def _pooled(pool: SandboxPool, n: int, tick: Callable[[], None]) -> dict:
    pooled = []
    for _ in range(n):
        pool.wait_ready(timeout=30)  # measure a warm pool, not the refill rate
        sandbox, seconds = _first_command(pool.take)
        pooled.append(seconds * 1000)
        sandbox.close()
        tick()
    return {"pool_p50_ms": round(statistics.median(pooled), 2)}


def _burst(opener: Callable[[], Sandbox], burst: int, tick: Callable[[], None]) -> dict:
    def one(_: int) -> Sandbox:
        sandbox = _first_command(opener)[0]
        tick()
        return sandbox

    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=burst) as executor:
        opened = list(executor.map(one, range(burst)))
    seconds = time.perf_counter() - start
    for sandbox in opened:
        sandbox.close()
    return {"burst_size": burst, f"burst{burst}_s": round(seconds, 3)}


def run_sandbox_bench(
    n: int = 200,
    burst: int = 100,
    max_concurrent: int = 256,
    pool_size: int = 8,
    backend: str = "bwrap",
    base_dir: str | None = None,
    progress: bool = False,
) -> dict:
    """Measure sandbox start-up latency, burst, peak concurrency and memory (see module).

    Returns a flat JSON-ready dict: `p50_ms`, `p99_ms` (create to first command),
    `burst{burst}_s` (`burst100_s` by default), `peak_concurrent`,
    `memory_per_sandbox_mb`, `backend` and a few more.
    """
    if min(n, burst, max_concurrent, pool_size) < 1:
        raise ValueError("n, burst, max_concurrent and pool_size must all be >= 1")
    limits = Limits()
    result: dict = {"backend": backend, "n": n, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory(prefix="fleetrl-sandbox-bench-") as tmp:
        base = base_dir or make_synthetic_repo(tmp)
        result["base_files"] = sum(len(files) for _, _, files in os.walk(base))
        opener = lambda: open_sandbox(base, backend, limits)  # noqa: E731
        for _ in range(3):  # warm-up: imports, page cache, the once-per-process self-test
            _first_command(opener)[0].close()
        bar = Progress(transient=True) if progress else None
        with bar or contextlib.nullcontext():
            with _phase(bar, "create -> first command", n) as tick:
                result.update(_latency(opener, n, tick))
            pool = SandboxPool(base, size=pool_size, backend=backend, limits=limits)
            with pool, _phase(bar, "pool acquire -> first command", min(n, 50)) as tick:
                result.update(_pooled(pool, min(n, 50), tick))
            with _phase(bar, f"burst of {burst}", burst) as tick:
                result.update(_burst(opener, burst, tick))
            with _phase(bar, "peak concurrent", max_concurrent) as tick:
                result.update(_peak(base, backend, limits, max_concurrent, tick))
    return result
