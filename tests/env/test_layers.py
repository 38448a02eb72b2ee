"""The house rule that needs a fresh interpreter: package inits import nothing heavy."""

import subprocess
import sys
from pathlib import Path

import fleetrl

ROOT = Path(fleetrl.__file__).parent


def test_package_inits_import_nothing_heavy():
    packages = sorted(
        f"fleetrl.{p.parent.name}"
        for p in ROOT.glob("*/__init__.py")
        if p.parent.name != "__pycache__"
    )
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in packages)
        + "heavy = [m for m in ('torch', 'transformers', 'fsspec', 'httpx') if m in sys.modules]\n"
        + "print(','.join(heavy))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing {packages} loads {out.stdout.strip()}"
