"""Files on local disk: writing one so that a reader sees all of it or none of it, whether
a folder can be made at a path, and the cache folder of what fleetrl can rebuild.

Writers die midway, and processes write the same file at once: a cache entry, an object
of a store on local disk, a file downloaded from the store. Each write goes to a temporary
file beside the target and is then renamed over it, which POSIX makes atomic within a
folder. Temporary names end in `.tmp-<random hex>`; a local store's listing skips them.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def cache_dir() -> Path:
    """The folder of what fleetrl can rebuild (task repositories, verifier plugins, demos,
    cached evaluations): $FLEETRL_CACHE, else $XDG_CACHE_HOME/fleetrl or ~/.cache/fleetrl.
    One per machine; deleting it only costs the time to rebuild. Callers name their own
    subfolder."""
    if os.environ.get("FLEETRL_CACHE"):
        return Path(os.environ["FLEETRL_CACHE"]).expanduser().resolve()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser().resolve() / "fleetrl"


def write_whole(path: Path, data: bytes) -> None:
    """Write `data` to `path`, making its folder, so that a reader sees all of it or the
    file as it was, even when the writer dies midway; of concurrent writers the last wins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f"{path.name}.tmp-{uuid.uuid4().hex}")
    try:
        temporary.write_bytes(data)
        temporary.replace(path)
    finally:
        temporary.unlink(missing_ok=True)


def file_in_the_way(path: Path) -> Path | None:
    """The file at `path`, or at the nearest existing path above it, that stops a folder
    from being made at `path`; None when there is none. Lets a store, work or output folder
    fail up front with a sentence rather than deep inside a write."""
    for candidate in (path, *path.parents):
        if os.path.lexists(candidate):
            return None if os.path.isdir(candidate) else candidate
    return None
