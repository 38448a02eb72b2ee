"""Object store access, versioned weights with lossless delta sync, followers and relays."""

from fleetrl.store.codec import CodecError, CodecOptions
from fleetrl.store.follower import FollowerStats, SyncRecord, WeightFollower
from fleetrl.store.objectstore import (
    FsspecStore,
    LinkStats,
    ObjectNotFound,
    ObjectStore,
    ThrottledStore,
    open_store,
)
from fleetrl.store.relay import RegionRelay, RelayRecord
from fleetrl.store.weights import (
    CorruptWeights,
    FetchResult,
    Held,
    MissingWeights,
    PublishResult,
    WeightStore,
    WeightStoreError,
    WeightStoreOptions,
)

__all__ = [
    "CodecError",
    "CodecOptions",
    "CorruptWeights",
    "FetchResult",
    "FollowerStats",
    "FsspecStore",
    "Held",
    "LinkStats",
    "MissingWeights",
    "ObjectNotFound",
    "ObjectStore",
    "PublishResult",
    "RegionRelay",
    "RelayRecord",
    "SyncRecord",
    "ThrottledStore",
    "WeightFollower",
    "WeightStore",
    "WeightStoreError",
    "WeightStoreOptions",
    "open_store",
]
