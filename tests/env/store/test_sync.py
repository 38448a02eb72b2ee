"""Followers and region relays over SeaweedFS: the unit tier's checks (tests/unit/store),
with real engines and a real S3 server."""

from tests.unit.store.test_sync import (  # noqa: F401  (collected here, on S3)
    test_a_slow_link_slows_the_relay_not_the_engines,
    test_follower_applies_each_version_bit_exactly,
    test_follower_recovers_when_its_weights_are_not_what_it_thinks,
    test_follower_run_loop_catches_up_to_the_latest,
    test_follower_swaps_weights_while_a_request_is_in_flight,
    test_one_cross_region_copy_per_version_for_any_number_of_engines,
)
