"""Host-side file access that cannot be tricked into leaving a directory tree.

The harness reads and writes workspace files from the host, but the agent controls what
lies in the workspace: a symlink `notes.txt -> /etc/shadow` or `out -> /root/.bashrc`
must not make the host read or write outside it. Every path is therefore resolved by the
kernel with openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV): a path
or symlink that would climb out of the root fails with EXDEV instead. Files are opened
non-blocking and must be regular files, so a FIFO planted by the agent cannot hang the
host.

Contract: Linux >= 5.6 (openat2). Paths are relative to the root; a leading "/" or the
sandbox's own workdir prefix is stripped by `relative_path`.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

_SYS_OPENAT2 = 437  # same number on every architecture (added after the table unification)
_RESOLVE = 0x01 | 0x02 | 0x08  # RESOLVE_NO_XDEV | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH
_libc = ctypes.CDLL(None, use_errno=True)


class _OpenHow(ctypes.Structure):
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


def relative_path(path: str, workdir: str) -> str:
    """Normalise a caller's path ("/workspace/a/b", "a/./b", "/a/b") to "a/b" ("" = root)."""
    if path == workdir or path.startswith(workdir.rstrip("/") + "/"):
        path = path[len(workdir) :]
    parts = [p for p in path.split("/") if p not in ("", ".")]
    return "/".join(parts)


def open_beneath(root_fd: int, rel: str, flags: int, mode: int = 0) -> int:
    """openat2 of `rel` under `root_fd`; raises OSError (EXDEV when it would escape)."""
    how = _OpenHow(flags | os.O_CLOEXEC, mode if flags & os.O_CREAT else 0, _RESOLVE)
    fd = _libc.syscall(
        _SYS_OPENAT2, root_fd, os.fsencode(rel or "."), ctypes.byref(how), ctypes.sizeof(how)
    )
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{os.strerror(err)} (openat2 beneath the workspace)", rel)
    return fd


@contextmanager
def opened_root(root: str) -> Iterator[int]:
    """An O_PATH descriptor of `root` for `open_beneath`, closed on exit."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def read_beneath(root: str, rel: str, max_bytes: int | None = None) -> bytes:
    """The bytes of regular file `rel` under `root` (at most `max_bytes` if given)."""
    with opened_root(root) as root_fd:
        fd = open_beneath(root_fd, rel, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", rel)
        return f.read() if max_bytes is None else f.read(max_bytes)


def write_beneath(root: str, rel: str, data: bytes, mode: int = 0o644) -> None:
    """Create or truncate regular file `rel` under `root`, making parent directories."""
    if not rel:
        raise IsADirectoryError(errno.EISDIR, "cannot write the workspace root", rel)
    parts = rel.split("/")
    with opened_root(root) as root_fd:
        for i in range(1, len(parts)):
            parent = "/".join(parts[:i])
            try:
                os.close(open_beneath(root_fd, parent, os.O_PATH | os.O_DIRECTORY))
            except FileNotFoundError:
                grand = open_beneath(root_fd, "/".join(parts[: i - 1]), os.O_PATH | os.O_DIRECTORY)
                try:
                    os.mkdir(parts[i - 1], 0o755, dir_fd=grand)
                finally:
                    os.close(grand)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK | os.O_NOCTTY
        fd = open_beneath(root_fd, rel, flags, mode)
    with os.fdopen(fd, "wb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise IsADirectoryError(errno.EISDIR, "not a regular file", rel)
        f.write(data)


def list_beneath(root: str, rel: str) -> list[str]:
    """Sorted names in directory `rel` under `root`; directories get a trailing '/'."""
    with opened_root(root) as root_fd:
        fd = open_beneath(root_fd, rel, os.O_RDONLY | os.O_DIRECTORY)
    try:
        names = []
        for entry in os.scandir(fd):
            names.append(entry.name + "/" if entry.is_dir(follow_symlinks=False) else entry.name)
        return sorted(names)
    finally:
        os.close(fd)


def lstat_beneath(root: str, rel: str) -> os.stat_result | None:
    """lstat of `rel` under `root` without following a final symlink; None if absent or
    if reaching it would leave `root`."""
    parent, _, name = rel.rpartition("/")
    try:
        with opened_root(root) as root_fd:
            fd = open_beneath(root_fd, parent, os.O_PATH | os.O_DIRECTORY)
        try:
            return os.stat(name, dir_fd=fd, follow_symlinks=False)
        finally:
            os.close(fd)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as err:
        if err.errno == errno.EXDEV:
            return None
        raise


def readlink_beneath(root: str, rel: str) -> str:
    """Target of symlink `rel` under `root` (the link itself is not followed)."""
    parent, _, name = rel.rpartition("/")
    with opened_root(root) as root_fd:
        fd = open_beneath(root_fd, parent, os.O_PATH | os.O_DIRECTORY)
    try:
        return os.readlink(name, dir_fd=fd)
    finally:
        os.close(fd)
