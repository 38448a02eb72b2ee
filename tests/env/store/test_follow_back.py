"""Following a served version back (a rollback) and the gc's pins over SeaweedFS: the unit
tier's checks (tests/unit/store/test_follow_back.py), with a real S3 server."""

from tests.unit.store.test_follow_back import (  # noqa: F401  (collected here, on S3)
    test_a_follower_follows_its_target_back_from_a_full_snapshot,
    test_gc_keeps_a_pinned_version_fetchable,
)
