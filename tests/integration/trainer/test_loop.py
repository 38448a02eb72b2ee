"""The trainer process loop: consumes groups from the store once, publishes versions, drops
stale groups, and resumes bit-exactly from its checkpoint. Each run trains the shared tiny
checkpoint into its own folder under tmp_path."""

import json
import threading
import time

import pytest
import torch

from fleetrl.model.checkpoint import load_pretrained
from fleetrl.store.admission import Heartbeat, fleet_budget, read_grants, write_heartbeat
from fleetrl.store.control import Fenced, claim_incarnation
from fleetrl.store.trajectories import RegionReport, TrajectoryChannel
from fleetrl.store.weights import WeightStore
from fleetrl.trainer.loop import TrainerState, run_trainer
from fleetrl.types import Segment, Trajectory

torch.set_num_threads(1)


def sampled_group(
    seed: int, version: int = 0, rewards: tuple[float, float] = (1.0, 0.0)
) -> list[Trajectory]:
    """Two samples of one prompt, by default with different rewards (an informative
    group)."""
    g = torch.Generator().manual_seed(seed)
    return [
        Trajectory(f"t{seed}", [sampled_segment(g, version)], reward, "finish", 1, 0, 0, 0.1)
        for reward in rewards
    ]


def sampled_segment(g: torch.Generator, version: int) -> Segment:
    """A prompt of 3 tokens and 5 sampled ones (random, from `g`) at `version`."""
    completion = torch.randint(10, 200, (5,), generator=g).tolist()
    return Segment(
        token_ids=[1, 2, 3, *completion],
        loss_mask=[0, 0, 0] + [1] * 5,
        logprobs=[0.0] * 3 + [-7.0] * 5,
        versions=[-1] * 3 + [version] * 5,
    )


def feed(tmp_path, run, seeds, version=0, flat=()):
    """Hand in one group per seed as region "r"; seeds in `flat` without reward variance."""
    channel = TrajectoryChannel(str(tmp_path / run / "store"))
    for seed in seeds:
        rewards = (1.0, 1.0) if seed in flat else (1.0, 0.0)
        channel.append("r", sampled_group(seed, version, rewards), RegionReport("r", version))


def test_resume_is_exact_and_nothing_is_trained_twice(tmp_path, tiny_checkpoint, config_for):
    # Uninterrupted: 4 steps over 8 groups.
    feed(tmp_path, "straight", range(8))
    straight = run_trainer(config_for("straight", 4), tmp_path / "straight")
    # Interrupted after 2 steps, then resumed to 4, the same groups arriving in two halves.
    feed(tmp_path, "resumed", range(4))
    run_trainer(config_for("resumed", 2), tmp_path / "resumed")
    feed(tmp_path, "resumed", range(4, 8))
    resumed = run_trainer(config_for("resumed", 4), tmp_path / "resumed")

    assert straight.trained_samples == resumed.trained_samples == 16
    assert resumed.cursor == {"r": 7} and resumed.version == 4
    a = load_pretrained(tmp_path / "straight" / "final").state_dict()
    b = load_pretrained(tmp_path / "resumed" / "final").state_dict()
    assert all(torch.equal(a[name], b[name]) for name in a)
    base = load_pretrained(tiny_checkpoint).state_dict()
    assert not torch.equal(a["model.norm.weight"], base["model.norm.weight"])  # it trained

    weights = WeightStore(str(tmp_path / "resumed" / "store"))
    assert weights.latest() == 4
    published = weights.fetch(4).tensors
    # Published in the serving dtype (bf16): the masters rounded once.
    assert all(torch.equal(published[n], b[n].to(published[n].dtype)) for n in published)
    records = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").open()]
    assert [r["step"] for r in records if r["kind"] == "train"] == [1, 2, 3, 4]
    assert (tmp_path / "resumed" / "final" / "tokenizer.json").is_file()


def test_the_newest_keep_checkpoints_stay_in_the_store(tmp_path, config_for):
    feed(tmp_path, "kept", range(8))
    run_trainer(config_for("kept", 4, keep_checkpoints=3), tmp_path / "kept")
    store = WeightStore(str(tmp_path / "kept" / "store")).store
    kept = {key.split("/")[1] for key in store.list("checkpoints/") if "/step_" in key}
    assert kept == {"step_000002", "step_000003", "step_000004"}
    assert store.exists("checkpoints/step_000002/tokenizer.json")  # `fleetrl eval` takes it


def test_stale_groups_are_dropped_and_counted(tmp_path, config_for):
    feed(tmp_path, "stale", range(2))  # version 0: fine at step 1
    run_trainer(config_for("stale", 1, max_staleness=0), tmp_path / "stale")
    feed(tmp_path, "stale", range(2, 4), version=0)  # now 1 version behind: dropped
    feed(tmp_path, "stale", range(4, 6), version=1)  # current: trained
    state = run_trainer(config_for("stale", 2, max_staleness=0), tmp_path / "stale")
    assert state.dropped_samples == 4 and state.trained_samples == 8
    assert state.dropped_groups == 2  # given back to the admission budget in whole groups
    last = [json.loads(line) for line in (tmp_path / "stale" / "metrics.jsonl").open()][-2]
    assert last["kind"] == "train" and last["staleness_hist"] == [4]


def train_records(run_dir) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").open()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def assert_exactly_once(records: list[dict], read: set[str]) -> None:
    """The ledger contract: in the last record of each step no group appears twice, and
    every group read is trained, skipped, dropped or still pending exactly once."""
    last = {r["step"]: r for r in records}  # a later incarnation's record replaces
    kinds = ("group_ids", "skipped_group_ids", "dropped_group_ids")
    accounted = [g for step in sorted(last) for kind in kinds for g in last[step][kind]]
    accounted += last[max(last)]["pending_group_ids"]
    assert len(accounted) == len(set(accounted)), "a group was accounted for twice"
    assert set(accounted) == read


def test_a_trainer_resumed_behind_the_store_publishes_above_it(tmp_path, config_for):
    # The trainer died after publishing version 3 but its last checkpoint is step 2: the
    # resumed incarnation publishes the checkpoint's weights as version 4, never reusing 3.
    run = tmp_path / "behind"
    feed(tmp_path, "behind", range(8))
    run_trainer(config_for("behind", 3), run)
    weights = WeightStore(str(run / "store"))
    weights.store.put("checkpoints/LATEST", b"step_000002")  # as if step 3's never landed
    at_checkpoint = WeightStore(str(run / "store")).fetch(2).tensors
    state = run_trainer(config_for("behind", 4), run)
    assert weights.versions() == [0, 1, 2, 3, 4, 5, 6] and state.version == 6
    assert all(torch.equal(weights.fetch(4).tensors[k], v) for k, v in at_checkpoint.items())
    records = train_records(run)
    assert [(r["step"], r["incarnation"], r["version"]) for r in records] == [
        (1, 1, 1), (2, 1, 2), (3, 1, 3), (3, 2, 5), (4, 2, 6)
    ]  # fmt: skip
    assert_exactly_once(records, {f"r/{seq}" for seq in range(8)})


def test_a_pending_group_is_rechecked_for_staleness_when_trained(tmp_path, config_for):
    # Three groups at version 0, two per step: the third waits, and by the next step (which
    # trains version 1, bound 0) it is too stale: dropped, not trained.
    feed(tmp_path, "aged", range(3), version=0)
    run_trainer(config_for("aged", 1, max_staleness=0), tmp_path / "aged")
    feed(tmp_path, "aged", range(3, 5), version=1)
    run_trainer(config_for("aged", 2, max_staleness=0), tmp_path / "aged")
    first, second = train_records(tmp_path / "aged")
    assert first["pending_group_ids"] == ["r/2"]
    assert second["dropped_group_ids"] == ["r/2"] and second["group_ids"] == ["r/3", "r/4"]
    assert second["staleness_hist"] == [4]
    assert_exactly_once([first, second], {f"r/{seq}" for seq in range(5)})


def test_a_zombie_trainer_is_fenced_before_it_publishes(tmp_path, config_for):
    run = tmp_path / "zombie"
    config = config_for("zombie", 2)
    outcome: list[BaseException | TrainerState] = []

    def zombie() -> None:
        try:
            outcome.append(run_trainer(config, run, poll_s=0.05))
        except BaseException as err:
            outcome.append(err)

    weights = succeed_a_zombie(tmp_path, threading.Thread(target=zombie))
    assert isinstance(outcome[0], Fenced)
    assert weights.latest() == 0  # the zombie published nothing after the successor came


def succeed_a_zombie(tmp_path, zombie: threading.Thread) -> WeightStore:
    """Start the `zombie` trainer of run "zombie"; once it has published version 0 and
    waits for groups, a successor claims incarnation 2 and groups arrive: the zombie
    trains a step and must not publish it. Returns the run's weight store."""
    zombie.start()
    weights = WeightStore(str(tmp_path / "zombie" / "store"))
    while weights.latest() is None:
        time.sleep(0.05)
    assert claim_incarnation(weights.store) == 2
    feed(tmp_path, "zombie", range(2))
    zombie.join(timeout=120)
    return weights


def mixed_group(seed: int, oldest: int) -> list[Trajectory]:
    """An informative group whose samples straddle a weight swap: tokens of `oldest` and
    of `oldest + 1` (the oldest is what staleness counts)."""
    trajectories = sampled_group(seed, oldest)
    for t in trajectories:
        versions = t.segments[0].versions
        t.segments[0].versions = versions[:-2] + [oldest + 1] * 2
    return trajectories


def test_three_regions_with_slow_out_of_order_groups_never_exceed_the_bound(tmp_path, config_for):
    # Two fast regions each hand in two groups per version (twice what a step trains, so a
    # backlog builds and pending groups age between read and training); a slow region
    # holds its groups back and hands them in newest first, versions behind. Checked from
    # the regions' own log: no trained group lags the trained version by more than the bound.
    bound, run = 1, tmp_path / "three"
    config = config_for("three", 8, max_staleness=bound)
    store = str(run / "store")
    oldest: dict[str, int] = {}  # group id -> oldest sampled version, as each region wrote it
    lock, done = threading.Lock(), threading.Event()

    def hand_in(channel: TrajectoryChannel, name: str, group: list[Trajectory]) -> None:
        record = channel.append(name, group, RegionReport(name, group[0].segments[0].versions[-1]))
        with lock:
            oldest[f"{name}/{record.seq}"] = min(
                v for v in record.trajectories[0].segments[0].versions if v >= 0
            )

    def fast(name: str, seed: int) -> None:
        channel, weights, seen = TrajectoryChannel(store), WeightStore(store), -1
        while not done.is_set():
            version = weights.latest()
            if version is not None and version != seen:
                seen = version
                for _ in range(2):
                    seed += 1
                    hand_in(channel, name, sampled_group(seed, version))
            time.sleep(0.02)

    def slow() -> None:
        channel, weights, held, seed = TrajectoryChannel(store), WeightStore(store), [], 10_000
        while not done.is_set():
            version = weights.latest()
            if version is not None and (not held or held[-1][0] < version):
                seed += 1
                held.append((version, mixed_group(seed, version)))
            if len(held) == 3:  # newest first: out of order, the oldest two versions behind
                for _, group in reversed(held):
                    hand_in(channel, "slow", group)
                held = []
            time.sleep(0.02)

    regions = [
        threading.Thread(target=fast, args=("east", 0)),
        threading.Thread(target=fast, args=("west", 5_000)),
        threading.Thread(target=slow),
    ]
    for region in regions:
        region.start()
    try:
        run_trainer(config, run, poll_s=0.05)
    finally:
        done.set()
        for region in regions:
            region.join(timeout=30)

    records = train_records(run)
    assert [r["step"] for r in records] == list(range(1, 9))
    for record in records:
        trained_against = record["version"] - 1
        for group in record["group_ids"] + record["skipped_group_ids"]:
            assert trained_against - oldest[group] <= bound, (group, record["step"])
        assert len(record["staleness_hist"]) - 1 <= bound
    # The bound was enforced, not vacuous: groups came from all three regions, some were
    # read fresh and dropped later (aged while pending), and slow ones were dropped.
    trained = {g.split("/")[0] for r in records for g in r["group_ids"]}
    assert trained >= {"east", "west"}
    dropped = [g for r in records for g in r["dropped_group_ids"]]
    pending_before = {g for r in records[:-1] for g in r["pending_group_ids"]}
    assert pending_before & set(dropped), "no pending group aged past the bound"
    assert any(g.startswith("slow/") for g in dropped)
    assert_exactly_once(records, set(records[-1]["pending_group_ids"]) | {
        g for r in records for k in ("group_ids", "skipped_group_ids", "dropped_group_ids")
        for g in r[k]
    })  # fmt: skip
    assert set(oldest) >= {g for r in records for g in r["group_ids"]}


def hand_in_heartbeat(tmp_path, run) -> None:
    """Region "r" is alive, so the trainer's allocation rounds grant it the whole budget."""
    store = WeightStore(str(tmp_path / run / "store")).store
    write_heartbeat(store, Heartbeat("r", submitted=0, in_flight=0, held=0, time=time.time()))


def test_dynamic_sampling_fills_batches_with_signal(tmp_path, config_for):
    run = tmp_path / "dynamic"
    feed(tmp_path, "dynamic", range(8), flat={1, 3, 5, 7})
    hand_in_heartbeat(tmp_path, "dynamic")
    state = run_trainer(config_for("dynamic", 2), run)
    first, second = records = train_records(run)
    assert first["group_ids"] == ["r/0", "r/2"] and second["group_ids"] == ["r/4", "r/6"]
    assert first["skipped_group_ids"] == ["r/1", "r/3", "r/5", "r/7"]
    assert first["train_sequences"] == second["train_sequences"] == 4  # full batches
    # Reward over every group the step consumed: 2 of 4 trained samples, 8 of 8 skipped.
    assert first["reward"] == pytest.approx(10 / 12) and second["reward"] == 0.5
    assert state.skipped_groups == state.filtered_groups == 4 and state.trained_samples == 8
    assert_exactly_once(records, {f"r/{seq}" for seq in range(8)})
    # The four skipped groups' samples are given back: the budget grows past the formula.
    grants = read_grants(WeightStore(str(run / "store")).store)
    assert grants["r"] == fleet_budget(2, 10, 2 * 2, 0, last_step=2) + 4 * 2


def test_without_dynamic_sampling_a_batch_is_the_next_groups(tmp_path, config_for):
    run = tmp_path / "plain"
    feed(tmp_path, "plain", range(4), flat={1, 3})
    hand_in_heartbeat(tmp_path, "plain")
    state = run_trainer(config_for("plain", 2, dynamic_sampling=False), run)
    first, second = records = train_records(run)
    assert first["group_ids"] == ["r/0"] and first["skipped_group_ids"] == ["r/1"]
    assert second["group_ids"] == ["r/2"] and second["skipped_group_ids"] == ["r/3"]
    assert first["train_sequences"] == 2  # half a batch trained
    assert state.skipped_groups == 2 and state.filtered_groups == 0
    assert_exactly_once(records, {f"r/{seq}" for seq in range(4)})
    grants = read_grants(WeightStore(str(run / "store")).store)
    assert grants["r"] == fleet_budget(
        2, 10, 2 * 2, 0, last_step=2
    )  # skipped in the batch: not returned


def test_dynamic_sampling_steps_on_when_no_group_has_signal(tmp_path, config_for):
    # A policy that solves everything: after max_skip_batches x P skipped groups the step
    # trains on the informative groups it has (none here) and still publishes.
    run = tmp_path / "flat"
    feed(tmp_path, "flat", range(3), flat={0, 1, 2})
    state = run_trainer(config_for("flat", 1, max_skip_batches=1), run)
    (record,) = train_records(run)
    assert record["group_ids"] == [] and record["skipped_group_ids"] == ["r/0", "r/1", "r/2"]
    assert "loss" not in record and record["pass_rate"] == 1.0
    assert state.version == 1 and state.trained_samples == 0
    assert WeightStore(str(run / "store")).latest() == 1
