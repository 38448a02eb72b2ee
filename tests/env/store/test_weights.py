"""WeightStore on SeaweedFS: the unit tier's checks (tests/unit/store), on a real S3 server."""

from tests.unit.store.test_weights import (  # noqa: F401  (collected here, on S3)
    test_changed_only_and_a_held_copy_in_another_dtype,
    test_corrupt_or_missing_objects_are_clear_errors_with_nothing_applied,
    test_every_version_round_trips_bit_exactly,
    test_gc_keeps_the_last_versions_and_what_followers_need,
    test_interrupted_publish_keeps_the_previous_version,
    test_new_removed_and_reshaped_tensors,
    test_restarted_publisher_continues_the_delta_chain_and_full_schedule,
    test_two_publishers_racing_for_one_version_one_wins_intact,
    test_versions_are_immutable,
)
