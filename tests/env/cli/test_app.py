"""The installed entry point: `python -m fleetrl.cli --help` in a subprocess."""

import subprocess
import sys


def test_installed_entry_point_prints_help():
    out = subprocess.run(
        [sys.executable, "-m", "fleetrl.cli", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    for name in ("model", "serve", "bench"):
        assert name in out.stdout
