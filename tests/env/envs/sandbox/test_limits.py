"""Limits hold against hostile commands: wall time, fork bombs, memory, output, disk, and
processes left running in the background."""

from __future__ import annotations

import glob
import os
import threading
import time
from pathlib import Path

import pytest

from fleetrl.envs.sandbox import Limits, open_sandbox
from fleetrl.envs.sandbox.cgroups import cgroup_parents


@pytest.fixture
def base(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f.txt").write_text("x\n")
    return repo


def _host_procs_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (an unusual sleep duration)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        pids.append(int(entry))
            except OSError:
                continue
    return pids


def _no_command_cgroups(sandbox_id: str) -> bool:
    return not any(glob.glob(f"{p}/fleetrl-*-{sandbox_id}-*") for p in cgroup_parents())


def test_timeout_kills_the_command_and_everything_it_started(base: Path) -> None:
    with open_sandbox(base) as sb:
        start = time.monotonic()
        result = sb.exec("sleep 313.1 & sleep 313.2; echo never", timeout=1)
        assert result.timed_out and result.exit_code == 137 and result.stdout == ""
        assert 1 <= result.duration_s < 3 and time.monotonic() - start < 3
        assert _host_procs_with("313.") == []
        assert _no_command_cgroups(sb.id)
        assert sb.exec("echo alive").stdout == "alive\n"  # the sandbox itself survives
        # Closing its pipes does not let a command outlive its timeout.
        silent = sb.exec("exec >&- 2>&-; sleep 313.3", timeout=1)
        assert silent.timed_out and silent.duration_s < 3 and _host_procs_with("313.") == []


def test_background_processes_die_with_the_command(base: Path) -> None:
    with open_sandbox(base) as sb:
        start = time.monotonic()
        result = sb.exec("(setsid sleep 317.1 &); nohup sleep 317.2 >/dev/null & echo started")
        assert result.ok and result.stdout == "started\n" and time.monotonic() - start < 2
        assert _host_procs_with("317.") == []


def test_fork_bomb_is_contained(base: Path) -> None:
    limits = Limits(max_procs=32)
    count_forks = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 1000:\n"
        "        if os.fork() == 0:\n"
        "            time.sleep(60); os._exit(0)\n"
        "        n += 1\n"
        "except OSError as e:\n"
        "    print(n, e.errno)\n"
    )
    with open_sandbox(base, limits=limits) as sb:
        result = sb.exec(["python", "-c", count_forks], timeout=20)
        forks, errno = map(int, result.stdout.split())
        assert forks < 32 and errno == 11  # EAGAIN from the pids cgroup
        # The classic bomb runs into the limit; it gives up or the timeout takes it down.
        # The command outlives its first fork by 2 s: once it exits, the sandbox kills the
        # rest, and on a busy machine the bomb may not have reached the limit by then.
        bomb = sb.exec("bomb() { bomb | bomb & }; bomb; sleep 2", timeout=3)
        assert "fork: retry: Resource temporarily unavailable" in bomb.stderr
        assert bomb.duration_s < 4
        assert _no_command_cgroups(sb.id)
        assert sb.exec("echo alive").stdout == "alive\n"


def test_memory_limit(base: Path) -> None:
    with open_sandbox(base, limits=Limits(memory_mb=64)) as sb:
        big = sb.exec(["python", "-c", "b = bytearray(256 << 20); print('allocated')"])
        assert big.exit_code == 137 and big.oom_killed and "allocated" not in big.stdout
        small = sb.exec(["python", "-c", "b = bytearray(16 << 20); print('allocated')"])
        assert small.ok and not small.oom_killed


def test_output_is_capped_keeping_head_and_tail(base: Path) -> None:
    with open_sandbox(base, limits=Limits(max_output_bytes=1000)) as sb:
        result = sb.exec("seq 1 100000; echo err >&2")
        assert result.output_truncated and result.ok
        assert result.stdout.startswith("1\n2\n3\n") and result.stdout.endswith("99999\n100000\n")
        assert "bytes of output omitted" in result.stdout and len(result.stdout) < 1100
        assert result.stderr == "err\n"
        # Endless output does not hang or exhaust the host: the timeout ends it.
        endless = sb.exec("yes", timeout=1)
        assert endless.timed_out and endless.output_truncated and len(endless.stdout) < 1100


def test_disk_limit(base: Path) -> None:
    with open_sandbox(base, limits=Limits(disk_mb=16)) as sb:
        result = sb.exec("head -c 64M /dev/zero > big")
        assert result.exit_code != 0 and "No space left on device" in result.stderr
        tmp = sb.exec("head -c 64M /dev/zero > /tmp/big")
        assert "No space left on device" in tmp.stderr
        # Inodes are bounded too (each costs kernel memory outside the size limit).
        files = sb.exec("rm -f big /tmp/big; mkdir many && cd many && seq 1 5000 | xargs touch")
        assert "No space left on device" in files.stderr


def test_close_ends_a_running_command(base: Path) -> None:
    sb = open_sandbox(base)
    results = []
    thread = threading.Thread(target=lambda: results.append(sb.exec("sleep 331.5")))
    thread.start()
    time.sleep(0.3)
    start = time.monotonic()
    sb.close()
    thread.join(timeout=5)
    assert not thread.is_alive() and time.monotonic() - start < 5
    assert results[0].exit_code == 137 and _host_procs_with("331.5") == []
