"""The ObjectStore contract and the throttled link on SeaweedFS (tests/unit/store: local)."""

from tests.unit.store.test_objectstore import (  # noqa: F401  (collected here, on S3)
    test_create_is_a_conditional_write_one_of_many_creators_wins,
    test_list_folders_one_level_down,
    test_list_starts_after_a_key,
    test_put_get_list_delete,
    test_throttled_store_counts_and_delays,
)
