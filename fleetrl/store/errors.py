"""Errors of the store: a store that refuses this process, and the weight store's errors,
each naming the store, version or object concerned."""


class StoreAccessError(PermissionError):
    """The store answered but will not serve this process: access denied (credentials, a
    bucket's policy, a folder's owner or mode) or an S3 bucket that does not exist. The
    message is one line naming the store and what to check; never retried, since trying
    again cannot help (a PermissionError, which `is_transient` rules out)."""


class WeightStoreError(RuntimeError):
    """A version cannot be published or fetched; the message names the version and object."""


class MissingWeights(WeightStoreError):
    """A version, or an object it needs, is not in the store (never published, or collected)."""


class CorruptWeights(WeightStoreError):
    """Stored bytes do not decode, or decode to content whose hash does not match."""
