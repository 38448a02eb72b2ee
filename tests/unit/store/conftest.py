"""Store tests in this tier run on a local folder; tests/env/store reruns them on S3."""

import pytest


@pytest.fixture(params=["file"])
def store_backend(request: pytest.FixtureRequest) -> str:
    return request.param
