"""Versions in the serving dtype: a real trainer run publishes its float32 masters rounded to
bf16 (`store.publish_dtype`), logs what each version cost to ship, and ships far fewer bytes
than the same steps published in float32; `fleetrl bench weights --from-run` measures the
codec on the run's versions."""

import json

import pytest
import torch

from fleetrl.bench.weights import flat_figures, run_weights_bench_from_run
from fleetrl.config_files import load_config
from fleetrl.model.checkpoint import load_pretrained
from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
from fleetrl.store.weights import WeightStore
from fleetrl.trainer.loop import run_trainer
from fleetrl.types import Segment, Trajectory

torch.set_num_threads(1)
STEPS = 3


def group(seed: int) -> list[Trajectory]:
    """Two samples of one prompt with different rewards (a group with signal)."""
    g = torch.Generator().manual_seed(seed)
    trajectories = []
    for reward in (1.0, 0.0):
        completion = torch.randint(10, 200, (5,), generator=g).tolist()
        segment = Segment(
            token_ids=[1, 2, 3, *completion],
            loss_mask=[0, 0, 0] + [1] * 5,
            logprobs=[0.0] * 3 + [-7.0] * 5,
            versions=[-1] * 3 + [0] * 5,
        )
        trajectories.append(Trajectory(f"t{seed}", [segment], reward, "finish", 1, 0, 0, 0.1))
    return trajectories


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_checkpoint):
    """The same groups trained twice from the same base at the default learning rates, the
    versions published in bf16 (the default) and in float32: run folder by dtype."""
    root = tmp_path_factory.mktemp("publish-dtype")
    folders = {}
    for dtype in ("bfloat16", "float32"):
        run_dir = root / dtype
        overrides = {
            "name": dtype,
            "model": {"path": str(tiny_checkpoint)},
            "rollout": {"group_size": 2},
            "trainer": {
                "steps": STEPS,
                "groups_per_step": 2,
                "checkpoint_every": STEPS,
                "max_staleness": STEPS,  # the groups are all from version 0
            },
            "store": {"url": str(run_dir / "store"), "publish_dtype": dtype},
        }
        channel = TrajectoryChannel(str(run_dir / "store"))
        for seed in range(2 * STEPS):
            channel.append("r", group(seed), RegionReport("r", 0))
        run_trainer(load_config(overrides=overrides), run_dir)
        folders[dtype] = run_dir
    return folders


def syncs(run_dir) -> list[dict]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").open()]
    return [r for r in records if r["kind"] == "sync"]


def test_versions_are_the_float32_masters_rounded_to_bf16(runs):
    store = WeightStore(str(runs["bfloat16"] / "store"))
    assert store.latest() == STEPS
    masters = load_pretrained(runs["bfloat16"] / "final").state_dict()
    published = store.fetch(STEPS).tensors
    assert {t.dtype for t in masters.values()} == {torch.float32}
    assert {t.dtype for t in published.values()} == {torch.bfloat16}
    assert all(torch.equal(published[n], masters[n].to(torch.bfloat16)) for n in published)
    # The base as version 0 too: every version is what the engines serve.
    assert {e.dtype for e in store.manifest(0).tensors.values()} == {"bfloat16"}


def test_sync_records_carry_bytes_shipped_full_bytes_and_unchanged_fraction(runs):
    bf16, f32 = syncs(runs["bfloat16"]), syncs(runs["float32"])
    assert [r["step"] for r in bf16] == list(range(1, STEPS + 1))
    elements = sum(t.numel() for t in load_pretrained(runs["float32"] / "final").parameters())
    for run, records in (("bfloat16", bf16), ("float32", f32)):
        store = WeightStore(str(runs[run] / "store"))
        for record in records:
            # One full version: each distinct tensor once (tied or equal ones are stored once).
            tensors = store.manifest(record["step"]).tensors.values()
            assert record["full_bytes"] == sum(e.nbytes for e in tensors if e.alias is None)
            assert 0 <= record["unchanged_frac"] <= 1
            assert 0 < record["sync_bytes"] < record["full_bytes"]
    assert all(0.99 * 2 * elements < r["full_bytes"] <= 2 * elements for r in bf16)
    assert all(0.99 * 4 * elements < r["full_bytes"] <= 4 * elements for r in f32)
    # Default learning rates: some bf16 elements stay put, no float32 element does.
    assert all(r["unchanged_frac"] > 0.1 for r in bf16)
    assert all(r["unchanged_frac"] < 0.01 for r in f32)
    # The bf16 delta is much smaller than float32's on the same steps (not only 2x).
    for a, b in zip(bf16, f32, strict=True):
        assert a["sync_bytes"] < b["sync_bytes"] / 3


def test_bench_weights_from_run_measures_the_runs_versions(runs):
    result = run_weights_bench_from_run(str(runs["bfloat16"]))
    assert result["dtype"] == "bfloat16"
    assert [p["version"] for p in result["pairs"]] == list(range(1, STEPS + 1))
    records = syncs(runs["bfloat16"])
    for pair, record in zip(result["pairs"], records, strict=True):
        assert pair["base"] == pair["version"] - 1
        assert pair["unchanged_fraction"] == pytest.approx(record["unchanged_frac"])
        assert pair["full_bytes"] == record["full_bytes"]
        assert pair["stored_delta_bytes"] + pair["manifest_bytes"] == record["sync_bytes"]
        assert pair["delta_bytes"] < pair["full_bytes"] / 2
        assert pair["encode_s"] > 0 and pair["decode_s"] > 0
        assert "as_bfloat16" not in pair  # already served in bf16
    assert result["median"]["compression_ratio"] > 2
    # A float32 run (given as a store URL): measured as stored and as bf16 would ship it.
    f32 = run_weights_bench_from_run(str(runs["float32"] / "store"))
    assert f32["dtype"] == "float32" and len(f32["pairs"]) == STEPS
    as_bf16 = f32["median"]["as_bfloat16"]
    assert f32["median"]["unchanged_fraction"] < 0.01 < 0.1 < as_bf16["unchanged_fraction"]
    assert as_bf16["compression_ratio"] > 2 * f32["median"]["compression_ratio"]
    table = flat_figures({"runs": [], "from_run": f32})
    assert table["run: dtype"] == "float32"
    assert table["run as bf16: unchanged_fraction (p50)"] == as_bf16["unchanged_fraction"]
