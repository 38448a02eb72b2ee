"""Run one child process with a deadline and bounded output capture.

Shared by the backends: the caller builds the argv (bwrap's or a plain shell's) and says
how to kill the whole command; this module streams stdout and stderr through a selector so
neither pipe can fill and stall the child, keeps at most a head and a tail of each, and
kills the command at its deadline. Exit codes follow the shell convention (128 + signal).

Not covered: input to commands (stdin is /dev/null), pseudo-terminals.
"""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence

from fleetrl.envs.sandbox.types import ExecResult

# After the main process exits, a background child still holding the pipes gets this long
# before it is killed; bwrap never needs it (its PID namespace dies with the command).
_PIPE_GRACE_S = 0.5
_READ_CHUNK = 1 << 16


class _Capture:
    """Keeps the first and the last `limit // 2` bytes of a stream and counts the rest.

    The tail matters as much as the head: test runners print their summary last.
    """

    def __init__(self, limit: int) -> None:
        self.head_limit = limit - limit // 2
        self.tail_limit = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            excess = len(self.tail) - self.tail_limit
            if excess > 0:
                del self.tail[:excess]

    @property
    def truncated(self) -> bool:
        return self.total > len(self.head) + len(self.tail)

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        if not self.truncated:
            return head + tail
        omitted = self.total - len(self.head) - len(self.tail)
        return f"{head}\n[... {omitted} bytes of output omitted ...]\n{tail}"


def shell_exit_code(returncode: int) -> int:
    """Popen's returncode (negative for a signal) as a shell would print it."""
    return 128 - returncode if returncode < 0 else returncode


def run_captured(
    argv: Sequence[str],
    *,
    timeout: float,
    max_output_bytes: int,
    kill: Callable[[subprocess.Popen[bytes]], None],
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    stdin: int = subprocess.DEVNULL,
    pass_fds: Sequence[int] = (),
    on_start: Callable[[subprocess.Popen[bytes]], None] | None = None,
) -> ExecResult:
    """Run `argv` to completion or `timeout` seconds, whichever comes first.

    `kill(proc)` must end the command and everything it started; it is called at the
    deadline and when background children outlive the main process. `on_start(proc)` lets
    the caller register the process (so `close()` from another thread can kill it);
    `pass_fds` stay open in the child; `stdin` is /dev/null unless a descriptor is given.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        list(argv),
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        close_fds=True,
        pass_fds=tuple(pass_fds),
        start_new_session=True,  # its own process group: Ctrl-C on the host does not reach it
    )
    if on_start is not None:
        on_start(proc)
    assert proc.stdout is not None and proc.stderr is not None
    captures = {proc.stdout.fileno(): _Capture(max_output_bytes)}
    captures[proc.stderr.fileno()] = _Capture(max_output_bytes)
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    deadline = start + timeout
    timed_out = False
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        sel.register(proc.stderr, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                timed_out = proc.poll() is None
                kill(proc)
                break
            # Wake up now and then to notice a main process whose children hold the pipes.
            for key, _ in sel.select(min(deadline - now, 0.25)):
                data = os.read(key.fd, _READ_CHUNK)
                if data:
                    captures[key.fd].feed(data)
                else:
                    sel.unregister(key.fileobj)
            if proc.poll() is not None:
                deadline = min(deadline, time.monotonic() + _PIPE_GRACE_S)
    proc.stdout.close()
    proc.stderr.close()
    try:
        # A command may close its pipes and keep running: the deadline still holds.
        returncode = proc.wait(timeout=max(deadline - time.monotonic(), 0))
    except subprocess.TimeoutExpired:
        timed_out = True
        kill(proc)
        returncode = proc.wait(timeout=10)
    duration = time.monotonic() - start
    out, err = captures[out_fd], captures[err_fd]
    return ExecResult(
        exit_code=128 + signal.SIGKILL if timed_out else shell_exit_code(returncode),
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        output_truncated=out.truncated or err.truncated,
        duration_s=duration,
    )
