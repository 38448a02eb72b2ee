"""The gate of a real-time run (`fleetrl.orchestrate.gate`) on the shipped base model,
which solves most micro held-out tasks: a broken version is rejected and never served, the
base's weights published again pass and are served. Real episodes in real sandboxes."""

from __future__ import annotations

import torch

from fleetrl.config_files import load_config
from fleetrl.orchestrate.gate import Gate
from fleetrl.orchestrate.roles import start_gate
from fleetrl.orchestrate.run import create_run
from fleetrl.store.serving import history, served_version, verdicts
from fleetrl.store.weights import WeightStore, WeightStoreOptions

TASKS = 6


def test_the_gate_rejects_a_broken_version_and_serves_a_sound_one(tmp_path):
    overrides = {
        "model": {"path": "base"},
        "gate": {"tasks": TASKS},
        "harness": {"max_turns": 4},  # the micro expert's ~3 turns, and one to spare
        "eval": {"split": "heldout"},
    }
    url = str(tmp_path / "store")
    create_run(load_config(overrides=overrides), url)
    started = start_gate(url, tmp_path / "gate")
    gate = Gate(started)
    store, config = started.store, started.config
    options = WeightStoreOptions(config.store.full_every, publish_dtype=config.store.publish_dtype)
    weights = WeightStore(store, options)
    base = {name: t.float() for name, t in weights.fetch(0).tensors.items()}
    assert gate.judge_newest() is None  # only the base, which is served

    g = torch.Generator().manual_seed(0)
    weights.publish(1, {name: 0.02 * torch.randn(t.shape, generator=g) for name, t in base.items()})
    rejected = gate.judge_newest()
    assert rejected is not None and rejected.version == 1 and not rejected.passed
    assert rejected.serving_version == 0 and rejected.tasks == TASKS
    assert rejected.pass_at_1 == 0.0 and rejected.serving_pass_at_1 >= 0.5  # base solves most
    assert rejected.gain_high < 0 and "worse beyond noise" in rejected.reason
    assert served_version(store) == 0 and history(store) == []
    assert gate.judge_newest() is None  # judged once

    weights.publish(2, base)  # the base's weights again: as good as what is served
    passed = gate.judge_newest()
    assert passed is not None and passed.version == 2 and passed.passed
    assert passed.serving_version == 0  # judged against what is served, not the rejected 1
    assert (
        passed.pass_at_1 == rejected.serving_pass_at_1 and passed.gain_low <= 0 <= passed.gain_high
    )
    assert served_version(store) == 2 and [(c.version, c.by) for c in history(store)] == [
        (2, "gate")
    ]
    assert [(v.version, v.passed) for v in verdicts(store)] == [(1, False), (2, True)]
    assert gate.judge_newest() is None  # the newest is served
