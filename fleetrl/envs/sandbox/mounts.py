"""Host side of a bwrap sandbox: a private mount namespace holding its overlay.

Each sandbox owns a mount namespace of its own, created by a short-lived thread (a thread
may unshare its mount namespace alone; the process keeps the host's):

    sandbox namespace (a copy of the host's, propagation private)
      <root>/mnt/            tmpfs of Limits.disk_mb: the only writable storage
                 upper/      overlay upper layer (the agent's changes)
                 work/       overlay work dir
                 tmp/        the sandbox's /tmp (persists across commands, like a container)
                 merged/     overlay: base_dir (read-only lower) + upper

The host namespace never sees these mounts. That keeps each bwrap start cheap however
many sandboxes are open (bwrap copies its parent's mount table, and a table with two
mounts per open sandbox made starts 3x slower at 100 sandboxes), and makes cleanup the
kernel's job: a namespace lives while something references it (our descriptor, or a
command started in it), so closing the descriptors, or the death of the process, unmounts
everything. Creating a sandbox copies nothing: two mount(2) calls.

Commands enter the namespace with `nsenter --mount=/proc/self/fd/0` (the namespace is
their stdin until bwrap starts). The host reads the workspace through the descriptor of
the tmpfs root: /proc/self/fd/<rw>/merged crosses into the namespace's mounts.

Contract: root on the host (CAP_SYS_ADMIN), overlayfs in the kernel.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import stat
import threading

_CLONE_NEWNS = 0x00020000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 0x2, 0x4, 0x4000, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)

# /etc entries that configure libraries and shells but hold no host secrets or identity.
_ETC_ENTRIES = (
    "alternatives", "bash.bashrc", "inputrc", "ld.so.cache", "ld.so.conf", "ld.so.conf.d",
    "localtime", "timezone", "mime.types", "nsswitch.conf", "os-release", "profile",
    "protocols", "services", "magic", "terminfo", "python3", "python3.11",
)  # fmt: skip
# Written in place of the host's: who "root" is, and localhost.
_SYNTH_ETC = {
    "passwd": "root:x:0:0:root:/tmp:/bin/bash\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    "group": "root:x:0:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost sandbox\n::1 localhost\n",
}


def sandbox_root() -> str:
    """Directory of the shared sandbox files ($FLEETRL_SANDBOX_ROOT overrides).

    /run by default: root's runtime directory is never aged by tmp cleaners (which would
    delete the /etc tree under a long-running process) and not writable by other users.
    """
    return os.environ.get("FLEETRL_SANDBOX_ROOT", "/run/fleetrl-sandboxes")


def _check(rc: int, what: str) -> None:
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(source: str, target: str, fstype: str, options: str) -> None:
    # mount(2) directly: a /bin/mount process would cost more than the mount itself.
    flags = _MS_NOSUID | _MS_NODEV
    rc = _libc.mount(source.encode(), target.encode(), fstype.encode(), flags, options.encode())
    _check(rc, f"mount -t {fstype} on {target}")


_prepare_lock = threading.Lock()


def prepare_root(root: str) -> str:
    """Create the root's shared mount point and /etc tree; returns the /etc tree's path.

    The /etc tree is a copy of the harmless host entries plus the synthetic files, named
    by a hash of its content: immutable once made, shared by every process, and one bind
    mount per command instead of twenty.
    """
    with _prepare_lock:
        os.makedirs(os.path.join(root, "mnt"), mode=0o755, exist_ok=True)
        # Refuse a root planted by another user, e.g. when $FLEETRL_SANDBOX_ROOT points into
        # a world-writable directory (through a symlink we would mount wherever it points).
        st = os.lstat(root)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
            raise OSError(f"sandbox root {root} is not a directory owned by this user")
        os.chmod(root, 0o711)
        digest = hashlib.sha256()
        for name in _ETC_ENTRIES:
            for path in _tree(os.path.join("/etc", name)):
                digest.update(path.encode() + b"\0" + _fingerprint(path) + b"\0")
        digest.update(repr(sorted(_SYNTH_ETC.items())).encode())
        etc = os.path.join(root, f"etc-{digest.hexdigest()[:16]}")
        if not os.path.isdir(etc):
            tmp = f"{etc}.{os.getpid()}.{threading.get_ident()}"
            os.mkdir(tmp, 0o755)
            for name in _ETC_ENTRIES:
                source = os.path.join("/etc", name)
                if os.path.isdir(source) and not os.path.islink(source):
                    shutil.copytree(source, os.path.join(tmp, name), symlinks=True)
                elif os.path.lexists(source):
                    shutil.copy2(source, os.path.join(tmp, name), follow_symlinks=False)
            for name, text in _SYNTH_ETC.items():
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(text)
            try:
                os.rename(tmp, etc)
            except OSError:  # another process made the same tree first
                shutil.rmtree(tmp, ignore_errors=True)
        return etc


def _tree(path: str) -> list[str]:
    if not os.path.isdir(path) or os.path.islink(path):
        return [path] if os.path.lexists(path) else []
    return sorted(os.path.join(d, f) for d, dirs, files in os.walk(path) for f in dirs + files)


def _fingerprint(path: str) -> bytes:
    if os.path.islink(path):
        return b"L" + os.fsencode(os.readlink(path))
    if os.path.isfile(path):
        with open(path, "rb") as f:
            return b"F" + hashlib.sha256(f.read()).digest()
    return b"D"


class SandboxMounts:
    """The private mount namespace of one sandbox, held by two descriptors."""

    def __init__(self, root: str, base_dir: str, disk_mb: int) -> None:
        self.mnt = os.path.join(root, "mnt")
        outcome: list[BaseException | tuple[int, int]] = []
        thread = threading.Thread(
            target=self._create, args=(base_dir, disk_mb, outcome), name="sandbox-mounts"
        )
        thread.start()
        thread.join()
        if isinstance(outcome[0], BaseException):
            raise outcome[0]
        self.ns_fd, self.rw_fd = outcome[0]

    def _create(self, base_dir: str, disk_mb: int, outcome: list) -> None:
        """Runs in its own thread, which ends afterwards: only it enters the namespace."""
        try:
            _check(_libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            # Private: nothing mounted here may propagate back to the host's namespace.
            _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make-rprivate")
            # nr_inodes too: inodes cost kernel memory that size= does not count.
            _mount("tmpfs", self.mnt, "tmpfs", f"size={disk_mb}m,nr_inodes={disk_mb * 256}")
            for name in ("upper", "work", "merged"):
                os.mkdir(os.path.join(self.mnt, name), 0o755)
            os.mkdir(os.path.join(self.mnt, "tmp"))
            os.chmod(os.path.join(self.mnt, "tmp"), 0o1777)
            # The workspace root shows the upper layer's root: give it the base's owner and
            # mode, so it looks like a real checkout.
            st = os.stat(base_dir)
            upper = os.path.join(self.mnt, "upper")
            os.chown(upper, st.st_uid, st.st_gid)
            os.chmod(upper, st.st_mode & 0o7777)
            # redirect_dir/metacopy off: the upper layer then holds whole files and plain
            # directories, which is what `changes.upper_candidates` reads.
            options = (
                f"lowerdir={base_dir},upperdir={upper},workdir={self.mnt}/work,"
                "redirect_dir=off,metacopy=off,index=off,xino=off"
            )
            _mount("overlay", os.path.join(self.mnt, "merged"), "overlay", options)
            ns_fd = os.open("/proc/thread-self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            rw_fd = os.open(self.mnt, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            outcome.append((ns_fd, rw_fd))
        except BaseException as err:
            outcome.append(err)

    def close(self) -> None:
        """Drop our references; the kernel unmounts once no command holds the namespace."""
        for fd in (self.ns_fd, self.rw_fd):
            os.close(fd)
