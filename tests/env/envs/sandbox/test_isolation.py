"""What a sandboxed command cannot do: reach the network, write or see the host, escape
its PID namespace, gain privileges, or trick the host-side file API. Each test plays the
cheating agent for real, from inside a real bwrap sandbox."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from pathlib import Path

import pytest

import fleetrl
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.envs.sandbox.bwrap import default_ro_paths
from fleetrl.envs.sandbox.mounts import sandbox_root


@pytest.fixture
def base(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "main.py").write_text("print('hi')\n")
    return repo


def test_no_network_not_even_host_loopback(base: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(0.5)
    accepted: list[object] = []

    def accept() -> None:
        with contextlib.suppress(OSError):  # the timeout: nobody connected
            accepted.append(server.accept())

    thread = threading.Thread(target=accept)
    thread.start()
    probe = (
        "import socket\n"
        f"s = socket.socket(); s.settimeout(2)\n"
        "try:\n"
        f"    s.connect(('127.0.0.1', {port})); print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
        "print(sorted(n for _, n in socket.if_nameindex()))\n"
        "try:\n"
        "    socket.create_connection(('1.1.1.1', 53), timeout=2); print('CONNECTED')\n"
        "except OSError as e:\n"
        "    print(type(e).__name__)\n"
    )
    with open_sandbox(base) as sb:
        result = sb.exec(["python", "-c", probe])
    thread.join()
    server.close()
    assert result.stdout.split("\n")[:3] == ["ConnectionRefusedError", "['lo']", "OSError"]
    assert accepted == []


def test_no_writes_outside_the_sandbox(base: Path) -> None:
    targets = ["/usr/evil", "/evil", "/etc/passwd", f"{sys.prefix}/evil", f"{sys.base_prefix}/x"]
    with open_sandbox(base) as sb:
        for target in targets:
            result = sb.exec(["python", "-c", f"open({target!r}, 'w').write('x')"])
            assert result.exit_code == 1 and "Read-only file system" in result.stderr, target
        # Global sysctls check the uid, not capabilities: /proc must be read-only.
        # (Writing back the value just read: harmless even if it got through.)
        value = sb.exec("cat /proc/sys/vm/overcommit_memory").stdout.strip()
        sysctl = sb.exec(f"echo {value} > /proc/sys/vm/overcommit_memory")
        assert "Read-only file system" in sysctl.stderr
        assert sb.exec("echo changed > main.py").ok
    for target in targets:
        assert not os.path.exists(target) or target == "/etc/passwd"
    assert (base / "main.py").read_text() == "print('hi')\n"


def test_host_is_invisible(base: Path, tmp_path: Path) -> None:
    hidden = tmp_path / "hidden_tests"  # e.g. the verifier's hidden tests, elsewhere on the host
    hidden.mkdir()
    (hidden / "test_secret.py").write_text("ANSWER = 42\n")
    source = Path(fleetrl.__file__).parent  # this checkout's package, wherever it lives
    probes = [str(hidden), str(tmp_path), "/home", "/root/.bashrc", str(source),
              "/work/shared", "/etc/shadow", "/etc/pip.conf", sandbox_root(),
              "/sys"]  # fmt: skip
    with open_sandbox(base) as sb:
        for path in probes:
            result = sb.exec(["test", "-e", path])
            assert result.exit_code == 1, f"{path} is visible inside the sandbox"
        assert sb.exec("find / -name test_secret.py 2>/dev/null; true").stdout == ""
        # The interpreter prefixes are there (read-only), but nothing beside them.
        for prefix in {Path(sys.prefix), Path(sys.base_prefix)}:
            listed = sb.exec(["ls", "-A", str(prefix.parent)]).stdout
            assert listed == prefix.name + "\n", (prefix, listed)


def test_own_pid_namespace_without_privileges(base: Path) -> None:
    with open_sandbox(base) as sb:
        procs = sb.exec("ls /proc | grep -E '^[0-9]+$'").stdout.split()
        assert str(os.getpid()) not in procs and len(procs) <= 4
        assert sb.exec("grep CapEff /proc/self/status").stdout.split()[1] == "0000000000000000"
        for cmd in ["unshare -U true", "mount -t tmpfs none /tmp", "chroot / true",
                    "kill -9 1 && sleep 0.2 && echo still-here"]:  # fmt: skip
            result = sb.exec(cmd)
            assert result.exit_code != 0 or result.stdout == "still-here\n", cmd
        assert sb.exec("hostname").stdout == "sandbox\n"


def test_host_file_api_cannot_be_tricked_by_workspace_links(base: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("host secret")
    with open_sandbox(base) as sb:
        setup = f"ln -s {outside} leak && ln -s / root && ln -s ../.. up && mkfifo pipe"
        assert sb.exec(setup).ok
        for path in ["leak", "root/etc/passwd", f"root{outside}", "up/x", "../../etc/passwd"]:
            with pytest.raises(OSError):
                sb.read_file(path)
        for path in ["leak", f"root{tmp_path}/written", "up/written"]:
            with pytest.raises(OSError):
                sb.write_file(path, "x")
        with pytest.raises(OSError):
            sb.read_file("pipe")  # a FIFO would block a naive reader forever
        with pytest.raises(OSError):
            sb.list_dir("root")
        # Symlinks that stay inside the workspace work, as they would for a command.
        sb.exec("mkdir d && echo ok > d/f && ln -s d inside")
        assert sb.read_file("inside/f") == b"ok\n"
    assert outside.read_text() == "host secret"
    assert not (tmp_path / "written").exists()


def test_fleetrl_installed_under_a_mounted_folder_is_covered(base: Path) -> None:
    # Installed into site-packages (not editable), the package sits in a prefix every
    # sandbox mounts; the bundled suites there would rebuild a task's hidden tests.
    package = Path(fleetrl.__file__).parent
    site = str(package.parent)  # mounted like a prefix's site-packages would be
    with open_sandbox(base, ro_paths=[site, *default_ro_paths()]) as sb:
        assert sb.exec(["ls", "-A", str(package)]).stdout == ""
        imported = sb.exec([sys.executable, "-I", "-c", f"import sys; sys.path.append({site!r}); "
                            "import fleetrl.envs.micro"])  # fmt: skip
        assert imported.exit_code == 1 and "ModuleNotFoundError" in imported.stderr
        assert sb.exec(["touch", f"{package}/x.py"]).exit_code != 0  # and stays empty
        assert sb.exec(["ls", str(package.parent / "pyproject.toml")]).exit_code == 0
