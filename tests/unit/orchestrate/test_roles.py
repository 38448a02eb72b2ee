"""A role's start-up does each thing once: it opens each store once, reads and parses the
run's config once and checks it once, then hands the opened store and the parsed config
down to the run (`orchestrate.roles.Started`). Counted on a real run in a local-folder
store, the real code running under counting wraps."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest
from typer.testing import CliRunner

import fleetrl.cli.runs
import fleetrl.orchestrate.local
import fleetrl.orchestrate.roles
import fleetrl.rollout.region
import fleetrl.trainer.loop
from fleetrl.cli import app
from fleetrl.config import RunConfig, check_trainable
from fleetrl.config_files import parse_config, with_overrides
from fleetrl.orchestrate.local import prepare_run
from fleetrl.orchestrate.run import create_run
from fleetrl.store.control import signal_stop
from fleetrl.store.objectstore import FsspecStore, open_store
from fleetrl.store.run import CONFIG_KEY

runner = CliRunner()
# The modules that run a role's start-up, imported now so that every name they bind is
# wrapped (the roles import the trainer loop and the region lazily).
assert fleetrl.cli.runs and fleetrl.orchestrate.local and fleetrl.orchestrate.roles
assert fleetrl.rollout.region and fleetrl.trainer.loop


class Counted:
    """Calls of `open_store` by URL, of `parse_config` and `check_trainable`, and reads of
    the run's config object, wherever fleetrl calls them from."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.open_store = wrap_everywhere(monkeypatch, open_store)
        self.parse_config = wrap_everywhere(monkeypatch, parse_config)
        self.check_trainable = wrap_everywhere(monkeypatch, check_trainable)
        self.get = mock.Mock(wraps=FsspecStore.get)
        monkeypatch.setattr(FsspecStore, "get", lambda store, key: self.get(store, key))

    def opened(self) -> Counter[str]:
        return Counter(call.args[0] for call in self.open_store.call_args_list)

    def config_reads(self) -> int:
        return sum(call.args[1] == CONFIG_KEY for call in self.get.call_args_list)


def wrap_everywhere(monkeypatch: pytest.MonkeyPatch, function) -> mock.Mock:
    """A counting wrap of `function` in place of every fleetrl module's name for it."""
    counter = mock.Mock(wraps=function)
    for name, module in list(sys.modules.items()):
        if name.startswith("fleetrl") and getattr(module, function.__name__, None) is function:
            monkeypatch.setattr(module, function.__name__, counter)
    return counter


@pytest.fixture
def run(tmp_path: Path, tiny_checkpoint: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """The URL of a local-folder store holding a run of the tiny model; the test runs in
    tmp_path."""
    monkeypatch.chdir(tmp_path)
    url = str(tmp_path / "store")
    create_run(with_overrides(RunConfig(), {"model": {"path": str(tiny_checkpoint)}}), url)
    return url


class LoopBegins(Exception):
    """The trainer's loop was reached: its start-up is over."""


def test_the_trainer_starts_up_once(run, monkeypatch):
    counted = Counted(monkeypatch)
    monkeypatch.setattr(fleetrl.trainer.loop, "_gather", mock.Mock(side_effect=LoopBegins))
    result = runner.invoke(app, ["trainer", "--store", run, "--workdir", "t"])
    assert isinstance(result.exception, LoopBegins), result.output
    assert counted.opened() == {run: 1}
    assert counted.config_reads() == 1
    assert counted.parse_config.call_count == 1
    assert counted.check_trainable.call_count == 1


def test_a_region_starts_up_once(run, monkeypatch):
    signal_stop(open_store(run))  # the region starts up, finds the run over and exits
    counted = Counted(monkeypatch)
    regional = str(Path("regional").resolve())
    args = ["region", "--store", run, "--name", "r", "--workdir", "r", "--regional-store"]
    result = runner.invoke(app, [*args, regional])
    assert result.exit_code == 0, result.output
    assert counted.opened() == {run: 1, regional: 1}
    assert counted.config_reads() == 1
    assert counted.parse_config.call_count == 1


def test_the_local_launcher_opens_the_store_once_to_create_the_run(
    tmp_path, tiny_checkpoint, monkeypatch
):
    counted = Counted(monkeypatch)
    config = with_overrides(RunConfig(), {"model": {"path": str(tiny_checkpoint)}})
    url = prepare_run(config, tmp_path / "run")
    assert counted.opened() == {url: 1}
    assert open_store(url).exists(CONFIG_KEY)
