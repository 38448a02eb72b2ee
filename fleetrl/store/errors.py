"""Errors of the weight store: each names the version and object concerned."""


class WeightStoreError(RuntimeError):
    """A version cannot be published or fetched; the message names the version and object."""


class MissingWeights(WeightStoreError):
    """A version, or an object it needs, is not in the store (never published, or collected)."""


class CorruptWeights(WeightStoreError):
    """Stored bytes do not decode, or decode to content whose hash does not match."""
