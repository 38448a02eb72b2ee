"""The manifest of one weight version: what each tensor is, where its bytes lie, its hash.

Layout in the object store (one folder per version; keys relative to the store's root):

    weights/LATEST                              "42\n": the newest committed version
    weights/v00000042/manifest.json             this file's format (below)
    weights/v00000042/delta-TAG-00000.bin       per-tensor delta payloads, concatenated
    weights/v00000042/full-TAG-00000.safetensors full snapshot (every K-th version), a plain
                                                safetensors file any tool can read
    weights/followers/<name>.json               a follower's heartbeat (version it holds)

Data objects are cut into shards of at most `shard_bytes` (-00000, -00001, …) so publish
and fetch hold one shard in memory at a time. A version is committed when its manifest
exists and LATEST names it; data objects are written first, the manifest after them,
LATEST last, so a reader never sees a version whose bytes are not all there.

manifest.json is JSON with one tensor per line:

    {"format": "fleetrl.weights/1", "version": 42, "base": 41, "full": false,
     "created": 1764431000.5, "objects": {"delta-3f9c2a1b-00000.bin": 81234},
     "tensors": {
      "model.embed_tokens.weight": {"dtype": "bfloat16", "shape": [1024, 256],
        "nbytes": 524288, "hash": "sha256:…",
        "delta": {"codec": "sparse", "changed": 5741,
                  "blob": {"object": "delta-3f9c2a1b-00000.bin", "offset": 0, "length": 6032}}},
      "lm_head.weight": {…, "alias": "model.embed_tokens.weight"},
      …}}

`base` is the version the deltas are against (None: no deltas, a full snapshot only).
A version can carry both a full snapshot and a delta: followers that hold `base` download
the delta, newcomers the snapshot. `alias` marks a tensor whose content equals an earlier
tensor of the same version (tied embeddings): its bytes are stored once.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

FORMAT = "fleetrl.weights/1"
PREFIX = "weights"
LATEST_KEY = f"{PREFIX}/LATEST"
FOLLOWERS_PREFIX = f"{PREFIX}/followers/"


def version_prefix(version: int) -> str:
    """Folder of one version's objects, e.g. `weights/v00000042/`."""
    return f"{PREFIX}/v{version:08d}/"


def manifest_key(version: int) -> str:
    """Key of one version's manifest."""
    return version_prefix(version) + "manifest.json"


def parse_version_key(key: str) -> int | None:
    """The version a key belongs to (`weights/v00000042/…` → 42), or None."""
    parts = key.split("/")
    if len(parts) < 3 or parts[0] != PREFIX or not parts[1].startswith("v"):
        return None
    digits = parts[1][1:]
    return int(digits) if digits.isdigit() else None


def content_hash(algorithm: str, raw: Any) -> str:
    """`"<algorithm>:<hex digest>"` of a buffer's bytes; ValueError for an unknown algorithm."""
    return f"{algorithm}:{hashlib.new(algorithm, raw).hexdigest()}"


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype a manifest names ("bfloat16" → torch.bfloat16)."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"unknown dtype {name!r}")
    return dtype


def dtype_name(dtype: torch.dtype) -> str:
    """The manifest's name of a torch dtype (torch.bfloat16 → "bfloat16")."""
    return str(dtype).removeprefix("torch.")


@dataclass
class Blob:
    """Where one tensor's payload lies inside a version's data objects."""

    object: str  # data object name inside the version folder, e.g. "delta-3f9c2a1b-00000.bin"
    offset: int  # first byte of the payload in that object
    length: int  # payload bytes


@dataclass
class DeltaEntry:
    """One tensor's change against the manifest's base version."""

    codec: str  # "same" (no payload), "sparse", "xor" or "raw" (see codec.py)
    changed: int  # elements whose bits differ from the base (all of them for "raw")
    blob: Blob | None = None  # None for "same"


@dataclass
class TensorEntry:
    """One tensor of a version."""

    dtype: str  # torch dtype name, e.g. "bfloat16"
    shape: list[int]
    nbytes: int  # raw bytes (elements x element size)
    hash: str  # "<hashlib name>:<hex digest>" of the raw bytes (native little-endian)
    alias: str | None = None  # same content as this tensor of the version: stored once
    full: Blob | None = None  # its bytes in the full snapshot (versions with full=True)
    delta: DeltaEntry | None = None  # its change against base (versions with a base)


@dataclass
class Manifest:
    """Everything needed to reconstruct and verify one weight version."""

    version: int
    base: int | None  # version the deltas are against; None when there are no deltas
    full: bool  # a full snapshot is stored (every tensor has `full` or `alias`)
    created: float  # unix time of publication (informational)
    objects: dict[str, int] = field(default_factory=dict)  # data object name → bytes
    tensors: dict[str, TensorEntry] = field(default_factory=dict)

    def object_bytes(self, prefix: str) -> int:
        """Bytes of the data objects whose names start with `prefix` ("full"/"delta")."""
        return sum(size for name, size in self.objects.items() if name.startswith(prefix))

    def to_json(self) -> bytes:
        """Serialise: one tensor per line, so a manifest stays readable and diffable."""
        head = {"format": FORMAT, **asdict(self)}
        tensors = head.pop("tensors")
        lines = [json.dumps(name) + ": " + json.dumps(_drop_none(e)) for name, e in tensors.items()]
        body = json.dumps(head)[:-1] + ', "tensors": {\n' + ",\n".join(lines) + "\n}}\n"
        return body.encode()

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        """Parse and type a manifest; raises ValueError when it is not one."""
        raw: dict[str, Any] = json.loads(data)
        if raw.get("format") != FORMAT:
            raise ValueError(f"not a {FORMAT} manifest (format={raw.get('format')!r})")
        tensors = {}
        for name, entry in raw["tensors"].items():
            full = Blob(**entry["full"]) if entry.get("full") else None
            delta = None
            if entry.get("delta"):
                blob = entry["delta"].get("blob")
                delta = DeltaEntry(
                    codec=entry["delta"]["codec"],
                    changed=entry["delta"]["changed"],
                    blob=Blob(**blob) if blob else None,
                )
            tensors[name] = TensorEntry(
                dtype=entry["dtype"],
                shape=list(entry["shape"]),
                nbytes=entry["nbytes"],
                hash=entry["hash"],
                alias=entry.get("alias"),
                full=full,
                delta=delta,
            )
        return cls(
            version=raw["version"],
            base=raw["base"],
            full=raw["full"],
            created=raw["created"],
            objects=dict(raw["objects"]),
            tensors=tensors,
        )


def _drop_none(value: Any) -> Any:
    """Leave out unset optional fields: a third of a manifest's bytes would be nulls."""
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    return value
