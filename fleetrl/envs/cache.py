"""Where fleetrl keeps what it can rebuild: task repositories, verifier plugins, demos.

One folder per machine, `$FLEETRL_CACHE` if set, else `$XDG_CACHE_HOME/fleetrl` (or
`~/.cache/fleetrl`). Everything in it is derived from code and data elsewhere, so deleting
it only costs the time to rebuild. Callers name their own subfolder.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache folder: $FLEETRL_CACHE, else $XDG_CACHE_HOME/fleetrl or ~/.cache/fleetrl."""
    if os.environ.get("FLEETRL_CACHE"):
        return Path(os.environ["FLEETRL_CACHE"]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser().resolve() / "fleetrl"
