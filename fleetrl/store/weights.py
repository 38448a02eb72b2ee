"""WeightStore: versioned policy weights in an object store, as full snapshots and deltas.

Role: the trainer publishes every policy version; followers (engines, regional relays)
fetch them. Only compressed deltas travel in steady state (codec.py); layout and manifest
format are in manifest.py.

    publish(v, state) ─▶ per tensor: round to the served dtype (publish_dtype), hash,
                         encode against the previous version, and every K versions
                         also copy into a safetensors snapshot
                      ─▶ put data shards ─▶ put manifest ─▶ put LATEST    (commit order)

    fetch(v, have)    ─▶ route: the cheaper (in bytes) of
                           nearest full snapshot f + deltas f+1..v, or
                           the caller's held version h + deltas h+1..v
                      ─▶ decode into the store's own buffers ─▶ verify every hash ─▶ return

Contract:
- Versions are immutable and increase; `publish` refuses a version <= latest(), and its
  manifest is created exclusively (conditional write): of two publishers racing for one
  version, one fails and neither's data objects are overwritten (they carry a tag per
  publish). LATEST only moves forward.
- `fetch` returns a version bit-exactly or raises WeightStoreError (MissingWeights,
  CorruptWeights); the caller's `have` tensors are never modified, and nothing
  half-decoded is ever returned.
- A publish that dies before its manifest and LATEST leaves latest() at the previous
  version; its orphan objects are overwritten by the next publish or removed by `gc`.
- One publisher per store (the trainer, or a region's relay); a trainer at N ranks
  publishes each version in N parts, one per rank, committed as one manifest by rank 0
  (`plan` / `prepare` / `write_part` / `commit` / `accept`). Any number of readers.
- With `publish_dtype`, floating tensors are rounded to it on each publish, from the
  caller's tensors (float32 masters): rounding never accumulates across versions, and
  the versions (and their hashes) are the served weights, bit for bit.

Not covered: concurrent publishers, encryption, partial (per-tensor) fetches, reverse
deltas (going back to an older version is a fetch from a full snapshot).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from fleetrl.store import codec
from fleetrl.store.errors import CorruptWeights, MissingWeights, WeightStoreError
from fleetrl.store.manifest import (
    FOLLOWERS_PREFIX,
    LATEST_KEY,
    PREFIX,
    DeltaEntry,
    Manifest,
    TensorEntry,
    content_hash,
    dtype_name,
    manifest_key,
    parse_version_key,
    torch_dtype,
)
from fleetrl.store.objectstore import ObjectNotFound, ObjectStore, open_store
from fleetrl.store.rebuild import Buffer, plan_route, replay, verify
from fleetrl.store.shards import DeltaWriter, ShardReader, SnapshotWriter

__all__ = [
    "CorruptWeights",
    "FetchResult",
    "FollowerState",
    "Held",
    "MissingWeights",
    "PublishPlan",
    "PublishResult",
    "PublishedPart",
    "WeightStore",
    "WeightStoreError",
    "WeightStoreOptions",
]


@dataclass(frozen=True)
class WeightStoreOptions:
    """How versions are written. Readers need none of this: manifests describe themselves."""

    full_every: int = 10  # a full snapshot when this many versions passed since the last one
    shard_bytes: int = 1 << 30  # data objects are cut at about this size (memory per step)
    hash_name: str = "sha256"  # hashlib algorithm of the tensor hashes (sha256: SHA-NI fast)
    codec: codec.CodecOptions = field(default_factory=codec.CodecOptions)
    # Floating tensors are rounded to this dtype (a manifest name, e.g. "bfloat16") on
    # publish; None stores them as given (a relay republishing served versions).
    publish_dtype: str | None = None


class Held(NamedTuple):
    """Weights a caller already holds, to fetch only the deltas after them."""

    version: int  # the store version these tensors are, bit for bit
    tensors: Mapping[str, torch.Tensor]  # name → tensor (any device; dtype may differ)


@dataclass
class PublishResult:
    """What one publish wrote and what it cost."""

    version: int
    base: int | None  # version the delta is against (None: first version, full only)
    full: bool  # a full snapshot was written
    delta_bytes: int  # bytes of the delta objects (what a follower at `base` downloads)
    full_bytes: int  # bytes of the snapshot objects (0 unless full)
    manifest_bytes: int
    elements: int  # elements in the state dict (aliases counted once)
    nbytes: int  # bytes of one full version as published (uncompressed, aliases once)
    changed: int  # elements whose bits differ from `base` (all of them without a base)
    hash_s: float  # CPU seconds spent hashing
    encode_s: float  # CPU seconds spent encoding deltas
    publish_s: float  # wall seconds, uploads included

    @property
    def shipped_bytes(self) -> int:
        """What a follower holding `base` downloads for this version: the manifest and the
        delta objects (without a base: the manifest and the full snapshot)."""
        payload = self.delta_bytes if self.base is not None else self.full_bytes
        return self.manifest_bytes + payload

    @property
    def unchanged_frac(self) -> float:
        """Fraction of elements bit-identical to `base` (0 without a base)."""
        return 1 - self.changed / self.elements if self.elements else 1.0


@dataclass(frozen=True)
class PublishPlan:
    """What every part of one version agrees on before any is written."""

    version: int
    base: int | None  # version the deltas are against (None: full snapshot only)
    full: bool  # a full snapshot is written
    tag: str  # unique per publish: names its data objects (see shards.DeltaWriter)
    created: float  # unix time


@dataclass
class PublishedPart:
    """What one part of a version wrote: its tensors' entries and data objects, its cost."""

    tensors: dict[str, TensorEntry]
    objects: dict[str, int]  # data object name → bytes
    elements: int = 0  # elements of its tensors (aliases counted once)
    nbytes: int = 0  # their bytes as published
    changed: int = 0  # elements whose bits differ from the base
    hash_s: float = 0.0
    encode_s: float = 0.0


@dataclass
class FetchResult:
    """A reconstructed, verified version."""

    version: int
    tensors: dict[str, torch.Tensor]  # all tensors, or only the changed ones (changed_only)
    route: str  # how it was built, e.g. "held 41 + 1 delta" or "full 40 + 2 deltas"
    bytes_read: int  # bytes downloaded (manifests included)
    decode_s: float  # CPU seconds spent decoding
    hash_s: float  # CPU seconds spent verifying hashes
    fetch_s: float  # wall seconds in all


@dataclass
class FollowerState:
    """A follower's last heartbeat (see WeightStore.register_follower)."""

    version: int  # version it holds
    time: float  # unix time of the heartbeat


class WeightStore:
    """Publish and fetch policy versions in an object store (local folder or s3://).

    One instance serves one thread at a time (a follower calls it from one worker thread
    at a time); open one per thread for parallel use.
    """

    def __init__(
        self,
        store: str | ObjectStore,
        options: WeightStoreOptions | None = None,
        storage_options: dict | None = None,
    ) -> None:
        self.store = open_store(store, storage_options) if isinstance(store, str) else store
        self.url = self.store.url
        self.options = options or WeightStoreOptions()
        self._served = _floating_dtype(self.options.publish_dtype)
        # The publisher's previous version, the base of the next delta (own copies).
        self._previous: tuple[int, dict[str, Buffer]] | None = None
        self._staged: tuple[int, dict[str, Buffer]] | None = None  # written, not committed
        self._last_full: int | None = None
        self._manifests: OrderedDict[int, Manifest] = OrderedDict()  # committed: immutable
        self._manifest_bytes_read = 0  # manifests downloaded (a fetch reports its share)

    # -- reading ------------------------------------------------------------------------

    def latest(self) -> int | None:
        """The newest committed version, or None when nothing was published."""
        try:
            text = self.store.get(LATEST_KEY)
        except ObjectNotFound:
            return None
        try:
            return int(text.decode().strip())
        except ValueError as err:
            raise CorruptWeights(f"{self.url}/{LATEST_KEY}: not a version: {text[:40]!r}") from err

    def highest(self) -> int | None:
        """The highest version any publisher ever committed a manifest for (the newest may
        lack LATEST if its publisher died between the two); a new publisher starts above."""
        latest = self.latest()
        return max([*self.versions(), *([] if latest is None else [latest])], default=None)

    def versions(self) -> list[int]:
        """Versions whose manifest exists, ascending (the newest may not be committed yet)."""
        keys = [k for k in self.store.list(PREFIX + "/") if k.endswith("/manifest.json")]
        return sorted(v for k in keys if (v := parse_version_key(k)) is not None)

    def manifest(self, version: int) -> Manifest:
        """One version's manifest; raises MissingWeights or CorruptWeights."""
        if version in self._manifests:
            self._manifests.move_to_end(version)
            return self._manifests[version]
        try:
            data = self.store.get(manifest_key(version))
        except ObjectNotFound as err:
            raise MissingWeights(f"{self.url}: version {version} has no manifest") from err
        self._manifest_bytes_read += len(data)
        try:
            manifest = Manifest.from_json(data)
        except (ValueError, KeyError, TypeError) as err:
            raise CorruptWeights(f"{self.url}: version {version} manifest: {err}") from err
        self._manifests[version] = manifest
        if len(self._manifests) > 64:
            self._manifests.popitem(last=False)
        return manifest

    def fetch(
        self, version: int | None = None, have: Held | None = None, changed_only: bool = False
    ) -> FetchResult:
        """Reconstruct `version` (default: latest) bit-exactly and verify every hash.

        With `have`, the deltas after the caller's version are used when that downloads
        fewer bytes than the nearest full snapshot; the caller's tensors are read, never
        written. `changed_only` returns only tensors some delta on the route touched
        (what an engine holding `have` must load); otherwise every tensor, where unchanged
        ones share storage with the caller's (CPU) tensors. Returned tensors are on CPU.
        """
        start = time.perf_counter()
        if version is None:
            version = self.latest()
            if version is None:
                raise MissingWeights(f"{self.url}: no version has been published")
        if have is not None and have.version == version:
            tensors = {} if changed_only else dict(have.tensors)
            return FetchResult(version, tensors, "held", 0, 0.0, 0.0, time.perf_counter() - start)
        reader = ShardReader(self.store)
        manifest_bytes = self._manifest_bytes_read
        route = plan_route(self.manifest, version, have.version if have is not None else None)
        try:
            clock = time.thread_time()
            state = replay(route, self.manifest, have.tensors if have is not None else None, reader)
            decode_s = time.thread_time() - clock
            tensors = verify(route.target, state, changed_only)
            hash_s = time.thread_time() - clock - decode_s
        except ObjectNotFound as err:
            raise MissingWeights(f"{self.url}: version {version}: {err}") from err
        except (codec.CodecError, CorruptWeights) as err:
            raise CorruptWeights(f"{self.url}: version {version}: {err}") from err
        n = len(route.deltas)
        begin = f"full {route.start}" if route.start is not None else f"held {have.version}"
        return FetchResult(
            version=version,
            tensors=tensors,
            route=f"{begin} + {n} delta{'s' * (n != 1)}",
            bytes_read=reader.bytes_read + self._manifest_bytes_read - manifest_bytes,
            decode_s=decode_s,
            hash_s=hash_s,
            fetch_s=time.perf_counter() - start,
        )

    # -- writing ------------------------------------------------------------------------

    def publish(self, version: int, state_dict: Mapping[str, torch.Tensor]) -> PublishResult:
        """Store `state_dict` (rounded to `publish_dtype`, if set) as `version`: a delta
        against the previous version, plus a full snapshot every `full_every` versions (and
        for the first). Commits by writing the manifest, then LATEST, after all data
        objects."""
        start = time.perf_counter()
        plan = self.plan(version)
        try:
            entries, given, hash_s = self.prepare(state_dict)
            link_aliases(entries)
            part = self.write_part(plan, entries, given)
            part.hash_s += hash_s
            result = self.commit(plan, [part], list(entries), start)
        except BaseException:
            self.forget()
            raise
        self.accept(plan)
        return result

    # A version can also be published in parts, one per process of a sharded trainer
    # (`fleetrl.trainer.publish`): one `plan`, every part `prepare`d and its aliases
    # linked over all parts' entries, each part written by its own process
    # (`write_part`), the parts committed as one manifest by one of them (`commit`), and
    # each process `accept`s the version as the base of its next delta.

    def plan(self, version: int) -> PublishPlan:
        """Check that `version` can be published and decide its base and whether it
        carries a full snapshot."""
        latest = self.latest()
        if latest is not None and version <= latest:
            raise WeightStoreError(
                f"{self.url}: cannot publish version {version}: latest is {latest} "
                "(versions are immutable; publish a newer one)"
            )
        if self.store.exists(manifest_key(version)):
            raise WeightStoreError(
                f"{self.url}: version {version} exists (a publish that died before LATEST, "
                f"or another publisher); publish above {self.highest()}"
            )
        if self._previous is None and latest is not None:
            self._load_previous(latest)
        previous = self._previous[0] if self._previous is not None else None
        full = (
            previous is None
            or self._last_full is None
            or version - self._last_full >= self.options.full_every
        )
        return PublishPlan(version, previous, full, uuid.uuid4().hex[:8], time.time())

    def prepare(
        self, state_dict: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, TensorEntry], dict[str, Buffer], float]:
        """Each tensor rounded to `publish_dtype` and hashed: its manifest entry, its bytes
        (a view: `write_part` copies what it keeps), and the CPU seconds spent hashing."""
        entries: dict[str, TensorEntry] = {}
        given: dict[str, Buffer] = {}
        hash_s = 0.0
        for name, tensor in state_dict.items():
            buffer = Buffer.view_of(self.served(tensor))
            clock = time.thread_time()
            digest = content_hash(self.options.hash_name, buffer.raw)
            hash_s += time.thread_time() - clock
            entry = TensorEntry(
                dtype_name(buffer.dtype), list(buffer.shape), buffer.raw.nbytes, digest
            )
            entries[name], given[name] = entry, buffer
        return entries, given, hash_s

    def served(self, tensor: torch.Tensor) -> torch.Tensor:
        """`tensor` as it is published: a floating one rounded (to nearest even) to
        `publish_dtype`, if set."""
        if self._served is not None and tensor.is_floating_point():
            return tensor.detach().to(self._served)
        return tensor

    def write_part(
        self,
        plan: PublishPlan,
        entries: Mapping[str, TensorEntry],
        given: Mapping[str, Buffer],
        part: str = "",
    ) -> PublishedPart:
        """Encode and upload the tensors in `given` (their `entries`, aliases linked): a
        delta against the plan's base, and a snapshot when the plan is full. `part` names
        this part's data objects apart from other parts'. Their copies wait to become the
        next delta's base (`accept`)."""
        if plan.base is not None and (self._previous is None or self._previous[0] != plan.base):
            self._load_previous(plan.base)  # a process that did not plan (or just started)
        previous = self._previous[1] if plan.base is not None and self._previous else None
        manifest = Manifest(plan.version, plan.base, plan.full, plan.created)
        tag = f"{plan.tag}-{part}" if part else plan.tag
        deltas = DeltaWriter(self.store, manifest, self.options.shard_bytes, tag)
        snapshot = SnapshotWriter(self.store, manifest, self.options.shard_bytes, tag)
        buffers: dict[str, Buffer] = {}
        result = PublishedPart(manifest.tensors, manifest.objects)
        for name, raw in given.items():
            entry = manifest.tensors[name] = entries[name]
            if entry.alias is not None and entry.alias in buffers:  # tied weights: stored once
                buffers[name] = buffers[entry.alias]
                continue
            buffer = Buffer(raw.raw.copy(), raw.dtype, raw.shape)  # ours: callers reuse theirs
            buffers[name] = buffer
            if entry.alias is not None:  # its first lies in another part: only the base kept
                continue
            result.elements += raw.raw.size // raw.dtype.itemsize
            result.nbytes += raw.raw.size
            if previous is not None:
                old = previous.get(name)
                usable = old is not None and old.dtype == raw.dtype and old.shape == raw.shape
                clock = time.thread_time()
                encoded = codec.encode(
                    buffer.words(), old.words() if usable else None, self.options.codec
                )
                result.encode_s += time.thread_time() - clock
                result.changed += encoded.changed
                blob = deltas.add(encoded.payload) if encoded.codec != "same" else None
                entry.delta = DeltaEntry(encoded.codec, encoded.changed, blob)
            else:
                result.changed += raw.raw.size // raw.dtype.itemsize
            if plan.full:
                snapshot.add(name, buffer.tensor())
        deltas.close()
        snapshot.close()
        self._staged = (plan.version, buffers)
        return result

    def commit(
        self, plan: PublishPlan, parts: list[PublishedPart], order: list[str], start: float
    ) -> PublishResult:
        """Commit a version written in `parts`: its manifest (tensors in `order`, every
        part's objects), created exclusively, then LATEST. `start`: when the publish began
        (`time.perf_counter`), for its wall time."""
        manifest = Manifest(plan.version, plan.base, plan.full, plan.created)
        entries = {name: entry for part in parts for name, entry in part.tensors.items()}
        manifest.tensors = {name: entries[name] for name in order}
        for part in parts:
            manifest.objects.update(part.objects)
        body = manifest.to_json()
        if not self.store.create(manifest_key(plan.version), body):
            raise WeightStoreError(
                f"{self.url}: version {plan.version} was published by another publisher meanwhile"
            )
        latest = self.latest()
        if latest is None or plan.version > latest:  # LATEST only moves forward
            self.store.put(LATEST_KEY, f"{plan.version}\n".encode())
        return PublishResult(
            version=plan.version,
            base=manifest.base,
            full=plan.full,
            delta_bytes=manifest.object_bytes("delta"),
            full_bytes=manifest.object_bytes("full"),
            manifest_bytes=len(body),
            elements=sum(part.elements for part in parts),
            nbytes=sum(part.nbytes for part in parts),
            changed=sum(part.changed for part in parts),
            hash_s=sum(part.hash_s for part in parts),
            encode_s=sum(part.encode_s for part in parts),
            publish_s=time.perf_counter() - start,
        )

    def accept(self, plan: PublishPlan) -> None:
        """The committed version's part this publisher wrote becomes its next delta's base."""
        assert self._staged is not None and self._staged[0] == plan.version
        self._previous, self._staged = self._staged, None
        if plan.full:
            self._last_full = plan.version

    def forget(self) -> None:
        """Drop the base of the next delta (after a failed publish): it is rebuilt from the
        store's latest version when needed."""
        self._previous = self._staged = None

    def held(self) -> Held | None:
        """The last version this publisher wrote (or the store's latest), as a `have`.

        A relay fetches from its origin with this and republishes into its region.
        The tensors view the publisher's own buffers: read them, do not modify them.
        """
        if self._previous is None:
            latest = self.latest()
            if latest is None:
                return None
            self._load_previous(latest)
        assert self._previous is not None
        version, buffers = self._previous
        return Held(version, {name: buf.tensor() for name, buf in buffers.items()})

    def register_follower(self, name: str, version: int) -> None:
        """Record that follower `name` holds `version`, so `gc` keeps the deltas it needs."""
        record = {"version": version, "time": time.time()}
        self.store.put(f"{FOLLOWERS_PREFIX}{name}.json", json.dumps(record).encode())

    def followers(self, max_age_s: float | None = None) -> dict[str, FollowerState]:
        """Followers' last heartbeats; with `max_age_s`, only those heard from since."""
        now = time.time()
        states = {}
        for key in self.store.list(FOLLOWERS_PREFIX):
            try:
                record = json.loads(self.store.get(key))
                state = FollowerState(int(record["version"]), float(record["time"]))
            except (ObjectNotFound, ValueError, KeyError, TypeError):
                continue  # removed meanwhile, or not ours
            if max_age_s is None or now - state.time <= max_age_s:
                states[key[len(FOLLOWERS_PREFIX) : -len(".json")]] = state
        return states

    def gc(
        self, keep_last: int = 8, follower_ttl_s: float = 600.0, pinned: Sequence[int] = ()
    ) -> list[int]:
        """Delete old versions; returns the deleted version numbers.

        Kept: the last `keep_last` committed versions, every version after the oldest one
        a live follower (heartbeat within `follower_ttl_s`) holds or that is `pinned`
        (versions served before, to roll back to), and back to the newest full snapshot
        below all of those, so each kept version stays reconstructible.
        Also removed: leftovers of publishes that died before committing.
        """
        latest = self.latest()
        if latest is None:
            return []
        by_version: dict[int, list[str]] = {}
        for key in self.store.list(PREFIX + "/"):
            version = parse_version_key(key)
            if version is not None:
                by_version.setdefault(version, []).append(key)
        committed = sorted(
            v for v, keys in by_version.items() if v <= latest and manifest_key(v) in keys
        )
        if not committed:
            return []
        keep_from = committed[max(0, len(committed) - max(1, keep_last))]
        for state in self.followers(max_age_s=follower_ttl_s).values():
            keep_from = min(keep_from, state.version)
        keep_from = min([keep_from, *pinned])
        anchor = committed[0]
        for version in reversed(committed):
            if version <= keep_from and self.manifest(version).full:
                anchor = version
                break
        doomed = sorted(
            v
            for v, keys in by_version.items()
            if v < anchor or (v <= latest and manifest_key(v) not in keys)
        )
        # Manifests first: a version disappears whole before its data does.
        self.store.delete([manifest_key(v) for v in doomed if manifest_key(v) in by_version[v]])
        self.store.delete([k for v in doomed for k in by_version[v] if k != manifest_key(v)])
        for version in doomed:
            self._manifests.pop(version, None)
        return doomed

    # -- internals ----------------------------------------------------------------------

    def _load_previous(self, version: int) -> None:
        """After a restart: the store's latest becomes the base of the next delta."""
        tensors = self.fetch(version).tensors
        self._previous = (version, {name: Buffer.view_of(t) for name, t in tensors.items()})
        self._last_full = None
        manifest = self.manifest(version)  # the full snapshot schedule continues from here
        while version - manifest.version < self.options.full_every:
            if manifest.full:
                self._last_full = manifest.version
                break
            if manifest.base is None:
                break
            try:
                manifest = self.manifest(manifest.base)
            except MissingWeights:
                break


def link_aliases(entries: Mapping[str, TensorEntry]) -> None:
    """Mark each tensor whose content (hash, dtype, shape) equals an earlier one's as its
    alias (tied weights: stored once)."""
    first_of: dict[tuple[str, str, tuple[int, ...]], str] = {}
    for name, entry in entries.items():
        content = (entry.hash, entry.dtype, tuple(entry.shape))
        if content in first_of:
            entry.alias = first_of[content]
        else:
            first_of[content] = name


def _floating_dtype(name: str | None) -> torch.dtype | None:
    """The torch dtype of `publish_dtype`; raises ValueError unless it is a floating one."""
    if name is None:
        return None
    dtype = torch_dtype(name)
    if not dtype.is_floating_point:
        raise ValueError(f"publish_dtype {name!r} is not a floating-point dtype")
    return dtype
