"""Fixtures of the CLI's env-tier checks, from tests/env/store: the session's SeaweedFS and a
folder that user nobody may search."""

from tests.env.store.conftest import s3_server, shared_dir  # noqa: F401
