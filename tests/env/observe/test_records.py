"""Importing the records loads no torch: checked in a fresh interpreter."""

import subprocess
import sys


def test_observe_imports_no_torch_and_nothing_else_of_fleetrl():
    code = (
        "import sys, fleetrl.observe, fleetrl.observe.records\n"
        "bad = [m for m in sys.modules if m == 'torch' or m.startswith('fleetrl.')"
        " and not m.startswith('fleetrl.observe')]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
