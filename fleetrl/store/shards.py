"""A version's data objects: delta and snapshot shards written in order, read one at a time.

Role: the byte layer under WeightStore. Writers append payloads (deltas) or tensors
(snapshots) and put a shard each time it reaches `shard_bytes`, recording where each
tensor landed (a Blob) and each shard's size in the manifest. The reader fetches a shard
once, checks its size against the manifest, and hands out slices; it holds only the shard
in use, so memory stays near one shard whatever the model size.

Snapshot shards are plain safetensors files (any tool reads them); the manifest records
each tensor's byte range inside them so fetch needs no safetensors parsing.

Not covered: range reads (a shard is fetched whole), parallel uploads.
"""

from __future__ import annotations

import json
import struct

import safetensors.torch
import torch

from fleetrl.store.errors import CorruptWeights
from fleetrl.store.manifest import Blob, Manifest, version_prefix
from fleetrl.store.objectstore import ObjectStore


class ShardReader:
    """Reads payloads shard by shard, keeping only the current shard in memory."""

    def __init__(self, store: ObjectStore) -> None:
        self.store = store
        self.bytes_read = 0  # shard bytes downloaded
        self._key: str | None = None
        self._data = b""

    def read(self, manifest: Manifest, blob: Blob) -> memoryview:
        """The payload `blob` of version `manifest.version`; raises CorruptWeights or
        ObjectNotFound (the caller turns it into MissingWeights)."""
        key = version_prefix(manifest.version) + blob.object
        if key != self._key:
            self._data, self._key = b"", None  # drop the previous shard before the next
            data = self.store.get(key)
            self.bytes_read += len(data)
            expected = manifest.objects.get(blob.object)
            if expected != len(data):
                raise CorruptWeights(f"{key} has {len(data)} bytes, the manifest says {expected}")
            self._data, self._key = data, key
        if blob.offset + blob.length > len(self._data):
            raise CorruptWeights(f"{key}: a payload runs past the end of the object")
        return memoryview(self._data)[blob.offset : blob.offset + blob.length]


class DeltaWriter:
    """Concatenates delta payloads into `delta-TAG-NNNNN.bin` shards and puts each when full.

    TAG is unique per publish, so two publishers racing for one version never write the
    same object: only the manifest, created exclusively, decides which one counts."""

    def __init__(self, store: ObjectStore, manifest: Manifest, shard_bytes: int, tag: str) -> None:
        self.store = store
        self.tag = tag
        self.manifest = manifest  # receives each shard's size
        self.shard_bytes = shard_bytes
        self.parts: list[bytes] = []
        self.size = 0
        self.index = 0

    def _name(self) -> str:
        return f"delta-{self.tag}-{self.index:05d}.bin"

    def add(self, payload: bytes) -> Blob:
        """Queue one payload; returns where it will lie."""
        blob = Blob(self._name(), self.size, len(payload))
        self.parts.append(payload)
        self.size += len(payload)
        if self.size >= self.shard_bytes:
            self.close()
        return blob

    def close(self) -> None:
        """Put the shard being filled, if any."""
        if not self.parts:
            return
        data = b"".join(self.parts)
        self.store.put(version_prefix(self.manifest.version) + self._name(), data)
        self.manifest.objects[self._name()] = len(data)
        self.parts, self.size = [], 0
        self.index += 1


class SnapshotWriter:
    """Writes tensors into `full-TAG-NNNNN.safetensors` shards (TAG: see DeltaWriter);
    records each tensor's bytes."""

    def __init__(self, store: ObjectStore, manifest: Manifest, shard_bytes: int, tag: str) -> None:
        self.store = store
        self.tag = tag
        self.manifest = manifest  # receives each shard's size and each tensor's Blob
        self.shard_bytes = shard_bytes
        self.tensors: dict[str, torch.Tensor] = {}
        self.size = 0
        self.index = 0

    def add(self, name: str, tensor: torch.Tensor) -> None:
        """Queue one tensor (already in the manifest under `name`)."""
        self.tensors[name] = tensor
        self.size += tensor.nbytes
        if self.size >= self.shard_bytes:
            self.close()

    def close(self) -> None:
        """Put the shard being filled, if any."""
        if not self.tensors:
            return
        name = f"full-{self.tag}-{self.index:05d}.safetensors"
        data = safetensors.torch.save(self.tensors)
        # safetensors: u64 header length, JSON header with offsets relative to the data.
        (header_len,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + header_len])
        data_start = 8 + header_len
        for tensor_name in self.tensors:
            begin, end = header[tensor_name]["data_offsets"]
            self.manifest.tensors[tensor_name].full = Blob(name, data_start + begin, end - begin)
        self.store.put(version_prefix(self.manifest.version) + name, data)
        self.manifest.objects[name] = len(data)
        self.tensors, self.size = {}, 0
        self.index += 1
