"""Rebuilding one version from stored bytes: plan a route, replay it, verify the result.

WeightStore.fetch runs the three steps in order:

    plan_route  the cheaper, in bytes to download, of
                  the nearest full snapshot f + the deltas of f+1 .. v, or
                  the caller's held version h + the deltas of h+1 .. v
                (walks the manifests' `base` links back from v; stops as soon as going
                further back cannot be cheaper)
    replay      decode into Buffers: the snapshot's bytes, or views of the caller's
                tensors that are copied on first write (the caller's are never modified);
                tied tensors share one Buffer, copied before either is written
    verify      hash every tensor to be returned against the target manifest

Not covered: reverse deltas (XOR is symmetric, so v-1 is reachable from v, but fetch only
moves forward), partial fetches of some tensors.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import torch

from fleetrl.store import codec
from fleetrl.store.errors import CorruptWeights, MissingWeights
from fleetrl.store.manifest import Blob, Manifest, TensorEntry, content_hash, torch_dtype
from fleetrl.store.shards import ShardReader

ManifestOf = Callable[[int], Manifest]  # version → manifest; raises MissingWeights


@dataclass
class Buffer:
    """One tensor's bytes while a version is rebuilt (or kept as a publisher's base)."""

    raw: np.ndarray  # uint8, the tensor's bytes
    dtype: torch.dtype
    shape: tuple[int, ...]
    source: torch.Tensor | None = None  # the caller's tensor `raw` views, untouched so far

    @classmethod
    def view_of(cls, tensor: torch.Tensor) -> Buffer:
        """A buffer viewing a tensor's bytes (moved to CPU and made contiguous if needed)."""
        source = tensor.detach().cpu().contiguous()
        return cls(_bytes_of(source), source.dtype, tuple(source.shape), source=source)

    def words(self) -> np.ndarray:
        """The bytes as unsigned words of the element size (what the codecs work on)."""
        return codec.word_view(self.raw, self.dtype.itemsize)

    def tensor(self) -> torch.Tensor:
        """A tensor sharing this buffer's memory (the caller's own, if untouched)."""
        if self.source is not None:
            return self.source
        if self.raw.size == 0:  # torch cannot view an empty byte buffer as another dtype
            return torch.empty(self.shape, dtype=self.dtype)
        return torch.from_numpy(self.raw).view(self.dtype).reshape(self.shape)


@dataclass
class Route:
    """How to rebuild a version: a start, then deltas applied in order."""

    start: int | None  # full snapshot version to start from; None: the caller's version
    deltas: list[Manifest]  # oldest first
    target: Manifest


def plan_route(manifest_of: ManifestOf, version: int, have: int | None) -> Route:
    """The cheapest way, in bytes to download, to rebuild `version` (see module doc)."""
    target = manifest = manifest_of(version)
    chain: list[Manifest] = []  # newest first: deltas not yet chosen
    best: tuple[int, int | None, int] | None = None  # (bytes, start, deltas used)
    cost = 0  # bytes of the deltas in `chain`
    seek_have = have is not None and have < version
    while True:
        if manifest.full:
            candidate = cost + manifest.object_bytes("full")
            if best is None or candidate < best[0]:
                best = (candidate, manifest.version, len(chain))
        if manifest.base is None:
            break
        with_delta = cost + manifest.object_bytes("delta")
        if seek_have and manifest.base == have:
            if best is None or with_delta <= best[0]:
                best = (with_delta, None, len(chain) + 1)
            chain.append(manifest)
            break
        if seek_have and have is not None and manifest.base < have:
            seek_have = False  # the caller's version is not on this chain
        if best is not None and (not seek_have or with_delta >= best[0]):
            break  # going further back can only cost more
        chain.append(manifest)
        cost = with_delta
        try:
            manifest = manifest_of(manifest.base)
        except MissingWeights:
            break
    if best is None:
        raise MissingWeights(
            f"version {version} cannot be rebuilt: no full snapshot is reachable through "
            f"its delta chain (stopped at version {manifest.version})"
            + (f", and held version {have} is not on it" if have is not None else "")
        )
    _, start, used = best
    return Route(start, list(reversed(chain[:used])), target)


def replay(
    route: Route,
    manifest_of: ManifestOf,
    have: Mapping[str, torch.Tensor] | None,
    reader: ShardReader,
) -> dict[str, Buffer]:
    """Decode the route into buffers holding the target version (unverified)."""
    if route.start is not None:
        snapshot = manifest_of(route.start)
        state: dict[str, Buffer] = {}
        for name, entry in _in_storage_order(snapshot, "full"):
            if entry.full is None:
                raise CorruptWeights(f"version {snapshot.version}: {name} is not in the snapshot")
            data = reader.read(snapshot, entry.full)
            raw = np.frombuffer(data, np.uint8).copy()
            state[name] = Buffer(raw, _dtype(snapshot, name), tuple(entry.shape))
        _link_aliases(snapshot, state)
    else:
        assert have is not None
        state = {name: Buffer.view_of(tensor) for name, tensor in have.items()}
    for manifest in route.deltas:
        state = _apply_delta(manifest, state, reader)
    return state


def verify(
    target: Manifest, state: dict[str, Buffer], changed_only: bool
) -> dict[str, torch.Tensor]:
    """The target's tensors after checking each against its hash (tied ones hashed once).

    With `changed_only`, tensors still viewing the caller's untouched tensors are left out.
    """
    verified: dict[int, torch.Tensor] = {}  # buffer id → tensor
    tensors = {}
    for name, entry in target.tensors.items():
        buf = state[name]
        if changed_only and buf.source is not None:
            continue
        if id(buf) not in verified:
            try:
                digest = content_hash(entry.hash.partition(":")[0], buf.raw)
            except ValueError as err:
                raise CorruptWeights(f"version {target.version}: {name}: {err}") from err
            if buf.raw.nbytes != entry.nbytes or digest != entry.hash:
                raise CorruptWeights(
                    f"version {target.version}: {name} does not match its hash "
                    "(corrupt object, or held weights that are not the version claimed)"
                )
            verified[id(buf)] = buf.tensor()
        tensors[name] = verified[id(buf)]
    return tensors


def _apply_delta(
    manifest: Manifest, state: dict[str, Buffer], reader: ShardReader
) -> dict[str, Buffer]:
    refs = Counter(id(buf) for buf in state.values())  # tied tensors share one buffer
    new_state: dict[str, Buffer] = {}
    for name, entry in _in_storage_order(manifest, "delta"):
        delta = entry.delta
        dtype = _dtype(manifest, name)
        shape = tuple(entry.shape)
        if delta is None:
            raise CorruptWeights(f"version {manifest.version}: {name} has no delta entry")
        if delta.codec == "raw":
            raw = codec.decode_raw(reader.read(manifest, _blob(manifest, name)), entry.nbytes)
            new_state[name] = Buffer(raw, dtype, shape)
            continue
        base = state.get(name)
        if base is None:
            raise MissingWeights(
                f"version {manifest.version}: {name} is a delta against version "
                f"{manifest.base}, which lacks it"
            )
        if base.shape != shape:
            raise CorruptWeights(
                f"version {manifest.version}: {name} has shape {base.shape} in the base, "
                f"{shape} in the manifest"
            )
        if base.dtype != dtype:  # a caller holding another precision: cast; hashes decide
            cast = base.tensor().to(dtype).contiguous()
            base = Buffer(_bytes_of(cast), dtype, shape)
            refs[id(base)] = 1
        if delta.codec != "same":
            if base.source is not None or refs[id(base)] > 1:
                base = Buffer(base.raw.copy(), dtype, shape)  # copy on first write
            codec.apply(delta.codec, reader.read(manifest, _blob(manifest, name)), base.words())
        new_state[name] = base
    _link_aliases(manifest, new_state)
    return new_state


def _bytes_of(tensor: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor's bytes as a uint8 array (no copy)."""
    return tensor.reshape(-1).view(torch.uint8).numpy()


def _blob(manifest: Manifest, name: str) -> Blob:
    delta = manifest.tensors[name].delta
    if delta is None or delta.blob is None:
        raise CorruptWeights(f"version {manifest.version}: {name} has no payload")
    return delta.blob


def _dtype(manifest: Manifest, name: str) -> torch.dtype:
    try:
        return torch_dtype(manifest.tensors[name].dtype)
    except ValueError as err:
        raise CorruptWeights(f"version {manifest.version}: {name}: {err}") from err


def _in_storage_order(manifest: Manifest, kind: str) -> list[tuple[str, TensorEntry]]:
    """Non-alias tensors in shard order, so the reader fetches each shard once."""

    def position(item: tuple[str, TensorEntry]) -> tuple[str, int]:
        entry = item[1]
        blob = entry.full if kind == "full" else (entry.delta.blob if entry.delta else None)
        return (blob.object, blob.offset) if blob is not None else ("", 0)

    entries = [(n, e) for n, e in manifest.tensors.items() if e.alias is None]
    return sorted(entries, key=position)


def _link_aliases(manifest: Manifest, state: dict[str, Buffer]) -> None:
    for name, entry in manifest.tensors.items():
        if entry.alias is not None:
            if entry.alias not in state:
                raise CorruptWeights(
                    f"version {manifest.version}: {name} aliases unknown {entry.alias}"
                )
            state[name] = state[entry.alias]
