"""The trainer's integration fixtures."""

import pytest

from fleetrl.config_files import load_config


@pytest.fixture
def config_for(tmp_path, tiny_checkpoint):
    """The config of run `run` under tmp_path, training the shared tiny checkpoint."""

    def make(run, steps, max_staleness=10, **trainer):
        overrides = {
            "name": run,
            "model": {"path": str(tiny_checkpoint)},
            "rollout": {"group_size": 2},
            "trainer": {"steps": steps, "groups_per_step": 2, "max_staleness": max_staleness,
                        "checkpoint_every": 1, "lr": 1e-3, **trainer},
            "store": {"url": str(tmp_path / run / "store")},
        }  # fmt: skip
        return load_config(overrides=overrides)

    return make
