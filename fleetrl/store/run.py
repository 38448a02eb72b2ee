"""What a run keeps in its store besides weights and trajectories, so that a trainer or a
region starts from the store URL alone, on any machine:

    run/config.toml      the resolved run configuration
    run/base/<file>      the starting checkpoint, HF layout (config.json, safetensors,
                         tokenizer files): the trainer's float32 masters and the regions'
                         model shape and tokenizer (their weights then follow weights/)
    run/tasks.tar        the task folder (`tasks.tasks_dir`), when the run uses one;
                         bundled suites (`tasks.suite`) ship with fleetrl itself
    run/skip_solved.json the evaluation `tasks.skip_solved` names, when set, so that
                         every region leaves out the same tasks

The config is written last, so a run exists once `run/config.toml` does. A download goes to
a temporary folder renamed into place, so a reader never uses half a copy.
"""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import uuid
from pathlib import Path

from fleetrl.files import write_whole
from fleetrl.store.objectstore import ObjectNotFound, ObjectStore

CONFIG_KEY = "run/config.toml"
BASE_PREFIX = "run/base/"
TASKS_KEY = "run/tasks.tar"
SKIP_SOLVED_KEY = "run/skip_solved.json"


class RunNotFound(LookupError):
    """The store holds no run (no run/config.toml)."""


def upload_folder(store: ObjectStore, folder: Path, prefix: str) -> int:
    """Put every file of `folder` (not recursive) under `prefix`; returns the bytes put."""
    total = 0
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        data = path.read_bytes()
        store.put(prefix + path.name, data)
        total += len(data)
    return total


def download_folder(store: ObjectStore, prefix: str, dest: Path) -> Path:
    """The objects under `prefix` as files of `dest` (kept if already there)."""
    if dest.is_dir():
        return dest
    keys = store.list(prefix)
    if not keys:
        raise ObjectNotFound(f"{store.url}: nothing under {prefix!r}")
    partial = dest.with_name(f"{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    partial.mkdir(parents=True)
    for key in keys:
        (partial / key[len(prefix) :]).write_bytes(store.get(key))
    _rename_into_place(partial, dest)
    return dest


def download_file(store: ObjectStore, key: str, dest: Path) -> Path:
    """Object `key` as file `dest` (kept if already there)."""
    if dest.is_file():
        return dest
    write_whole(dest, store.get(key))
    return dest


def pack_folder(folder: Path) -> bytes:
    """A folder (recursively, git repositories included) as one tar archive."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buffer.getvalue()


def unpack_folder(data: bytes, dest: Path) -> Path:
    """A `pack_folder` archive as folder `dest` (kept if already there)."""
    if dest.is_dir():
        return dest
    partial = dest.with_name(f"{dest.name}.tmp-{uuid.uuid4().hex[:8]}")
    partial.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(partial, filter="data")  # no links or paths out of the folder
    _rename_into_place(partial, dest)
    return dest


def read_config_text(store: ObjectStore) -> str:
    """The run's resolved configuration (TOML); raises RunNotFound without one."""
    try:
        return store.get(CONFIG_KEY).decode()
    except ObjectNotFound:
        raise RunNotFound(
            f"{store.url} holds no run: create one with `fleetrl run create CONFIG --store URL`"
        ) from None


def _rename_into_place(partial: Path, dest: Path) -> None:
    try:
        os.rename(partial, dest)
    except OSError:  # another process of this machine got there first: use its copy
        shutil.rmtree(partial, ignore_errors=True)
        if not dest.is_dir():
            raise
