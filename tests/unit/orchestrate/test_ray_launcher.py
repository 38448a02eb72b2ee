"""The Ray launcher's pure parts: where regions go, and what a machine without Ray says."""

import sys

import pytest

from fleetrl.config_files import load_config
from fleetrl.orchestrate.ray_launcher import (
    RayMissing,
    region_placements,
    run_ray,
    store_credentials,
)


def test_regions_take_the_cluster_s_declared_region_resources_in_name_order():
    cluster = {"CPU": 64.0, "region-west": 1.0, "region-east": 1.0, "memory": 1e9}
    assert region_placements(2, cluster) == [
        ("region-east", {"region-east": 1.0}),
        ("region-west", {"region-west": 1.0}),
    ]
    assert region_placements(1, cluster) == [("region-east", {"region-east": 1.0})]


def test_without_declared_region_resources_regions_are_placed_by_cpu():
    assert region_placements(2, {"CPU": 3.0}) == [("region-0", {}), ("region-1", {})]


def test_more_regions_than_declared_resources_names_the_knob():
    with pytest.raises(
        ValueError, match=r"declares only 1 region resources \(region-west\).*--regions"
    ):
        region_placements(2, {"region-west": 1.0})


def test_without_ray_the_launcher_says_how_to_install_it(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    with pytest.raises(RayMissing, match=r"pip install 'fleetrl\[ray\]'"):
        run_ray(load_config(), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_the_launcher_s_aws_credentials_travel_to_the_actors():
    environ = {"AWS_ACCESS_KEY_ID": "k", "AWS_ENDPOINT_URL": "http://s3:8333", "HOME": "/root"}
    assert store_credentials(environ) == {
        "AWS_ACCESS_KEY_ID": "k",
        "AWS_ENDPOINT_URL": "http://s3:8333",
    }
