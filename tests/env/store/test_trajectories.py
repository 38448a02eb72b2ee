"""The trajectory channel on SeaweedFS: the unit tier's checks (tests/unit/store), on S3."""

from tests.unit.store.test_trajectories import (  # noqa: F401  (collected here, on S3)
    test_a_poll_lists_only_what_is_new,
    test_append_and_read_exactly_once,
    test_delete_before_keeps_the_numbering_and_the_unread,
    test_restarted_region_continues_numbering_and_gaps_wait,
)
