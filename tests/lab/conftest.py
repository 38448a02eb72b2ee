"""The micro suite fixtures of the unit tier, shared with the tests of the research code."""

from tests.unit.envs.micro.test_suite import _cache, suite  # noqa: F401  (fixtures)
