"""`fleetrl report`, `run create`, `status` and the roles' start-up: what they write, and
clean refusals (one line, exit code 2, nothing copied)."""

import json
import time
from pathlib import Path

import fsspec
import pytest
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.store.objectstore import open_store
from fleetrl.store.run import CONFIG_KEY
from tests.unit.store.failing_store import closed_port

runner = CliRunner()


def test_report_writes_html_and_refuses_missing_dirs(tmp_path):
    from fleetrl.observe import MetricsLogger

    with MetricsLogger(tmp_path / "metrics.jsonl") as log:
        log.log("train", 1, {"reward": 0.5, "pass_rate": 0.5})
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "report.html").read_text().startswith("<!DOCTYPE html>")
    missing = runner.invoke(app, ["report", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not a directory" in missing.output
    (tmp_path / "other").mkdir()
    other = runner.invoke(app, ["report", str(tmp_path / "other")])
    assert other.exit_code == 2 and "not a run directory" in other.output
    assert not (tmp_path / "other" / "report.html").exists()
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text('{"kind": "train", "st\n' + metrics.read_text())
    corrupt = runner.invoke(app, ["report", str(tmp_path)])
    assert corrupt.exit_code == 2 and "metrics.jsonl:1: not a JSON record" in corrupt.output


def test_report_shows_the_regions_of_the_store_the_run_dir_names(tmp_path):
    from fleetrl.store.region_metrics import GroupDone, RegionMetricsWriter

    run_dir, elsewhere = tmp_path / "run", tmp_path / "elsewhere"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(f'[store]\nurl = "{elsewhere}"\n')
    writer = RegionMetricsWriter(open_store(str(elsewhere)), "west")
    writer.append(GroupDone(group_id="west-0", time=1.0, versions=[0], episode_s=[1.0]))
    writer.flush()
    result = runner.invoke(app, ["report", str(run_dir)])
    assert result.exit_code == 0, result.output
    assert "<th>west</th>" in (run_dir / "report.html").read_text()
    # A config.toml that is no valid config: the report, without region metrics.
    (run_dir / "config.toml").write_text("[store]\nbogus = 1\n")
    invalid = runner.invoke(app, ["report", str(run_dir)])
    assert invalid.exit_code == 0, invalid.output
    assert "no region metrics in the store" in (run_dir / "report.html").read_text()


def test_status_of_a_missing_store_creates_nothing(tmp_path):
    store = tmp_path / "no-store"
    result = runner.invoke(app, ["status", "--store", str(store)])
    assert result.exit_code == 2 and "holds no run" in result.output
    assert not store.exists()


def test_run_create_refuses_a_skip_solved_file_it_cannot_read(tmp_path):
    missing = tmp_path / "eval.json"
    store = tmp_path / "store"
    args = ["run", "create", "--store", str(store), "--set", f"tasks.skip_solved={missing}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and f"tasks.skip_solved: cannot read {missing}" in result.output
    assert not (store / "run" / "config.toml").exists()


def test_run_create_refuses_a_skip_solved_file_of_another_model(tmp_path):
    other = tmp_path / "eval.json"
    passes = {"micro-train-0000": 4}
    doc = {"split": "train", "samples_per_task": 4, "task_passes": passes, "weights": "0" * 64}
    other.write_text(json.dumps(doc))
    store = tmp_path / "store"
    args = ["run", "create", "--store", str(store), "--set", f"tasks.skip_solved={other}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "evaluated other weights" in result.output
    assert not (store / "run" / "config.toml").exists()


# -- the store, the work folder and the run's config: mistakes refused before any copy ------


@pytest.fixture
def stored_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A store holding a run (the default config) and a stand-in base checkpoint: enough
    for the roles' start-up. The test runs in tmp_path, where the default work folders go."""
    monkeypatch.chdir(tmp_path)
    store = open_store(str(tmp_path / "store"))
    store.put(CONFIG_KEY, b"")
    store.put("run/base/config.json", b"{}")
    return tmp_path / "store"


@pytest.fixture
def unreachable_s3(monkeypatch: pytest.MonkeyPatch) -> None:
    """s3:// stores at a local port that refuses connections, with credentials, no
    retries inside botocore, and a 3 s outage window for every command."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{closed_port()}")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    monkeypatch.setattr("fleetrl.store.objectstore.DEFAULT_OUTAGE_S", 3.0)
    monkeypatch.setattr("fleetrl.cli.runs.QUICK_OUTAGE_S", 3.0)
    s3 = fsspec.get_filesystem_class("s3")
    s3.clear_instance_cache()  # a cached filesystem keeps the endpoint it was made with
    yield
    s3.clear_instance_cache()


def refused(args: list[str], message: str) -> None:
    """`fleetrl ARGS` ends with the one line `error: MESSAGE…` and exit code 2."""
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"error: {message}"), result.output
    assert result.output.count("\n") == 1, result.output


ROLES = [["status"], ["trainer"], ["region", "--name", "r"], ["run", "create"]]


@pytest.mark.parametrize("command", ROLES, ids=lambda c: c[0])
@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("s3://", "store URL s3:// names no bucket"),
        ("foo://x", "unknown store URL scheme 'foo' (use a folder or s3://bucket/prefix)"),
    ],
)
def test_a_store_url_that_names_no_store_is_one_line(command, url, message):
    refused([*command, "--store", url], message)


@pytest.mark.parametrize("command", ROLES, ids=lambda c: c[0])
def test_a_file_given_as_the_store_is_one_line(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("afile").write_text("not a store")
    refused([*command, "--store", "afile"], "afile is a file, not a store folder")


@pytest.mark.parametrize("command", ROLES, ids=lambda c: c[0])
def test_an_unreachable_store_is_one_line_after_the_outage_window(command, unreachable_s3):
    # A command a user waits for exits 2; a role exits 1, a crash its supervisor restarts:
    # the store may be in an outage rather than misnamed.
    start = time.monotonic()
    result = runner.invoke(app, [*command, "--store", "s3://bkt/pfx"])
    assert result.exit_code == (1 if command[0] in ("trainer", "region") else 2), result.output
    assert result.output.startswith("error: cannot reach store s3://bkt/pfx: ")
    assert result.output.count("\n") == 1, result.output
    assert time.monotonic() - start < 30  # the 3 s window, not the default 120 s


@pytest.mark.parametrize("command", [["trainer"], ["region", "--name", "r"]], ids=["t", "r"])
def test_a_store_lost_mid_run_ends_the_role_in_one_line_as_a_crash(
    command, stored_run, monkeypatch
):
    # The store went away for longer than the outage window after the start-up: exit 1,
    # which a supervisor restarts (not 2, a mistake to fix), and no traceback.
    from fleetrl.store.objectstore import StoreUnreachable

    def lost(*args, **kwargs):
        raise StoreUnreachable("cannot reach store s3://bkt/pfx: Connect timeout")

    monkeypatch.setattr("fleetrl.orchestrate.roles.train", lost)
    monkeypatch.setattr("fleetrl.orchestrate.roles.roll_out", lost)
    result = runner.invoke(app, [*command, "--store", str(stored_run)])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("error: cannot reach store s3://bkt/pfx: Connect timeout")
    assert "start this role again" in result.output and result.output.count("\n") == 1


def test_status_and_run_create_wait_less_for_the_store_than_the_roles():
    from fleetrl.cli.runs import QUICK_OUTAGE_S
    from fleetrl.store.objectstore import DEFAULT_OUTAGE_S

    assert QUICK_OUTAGE_S <= DEFAULT_OUTAGE_S / 10


def test_an_unreachable_regional_store_fails_before_the_copy(stored_run, unreachable_s3):
    args = ["region", "--store", str(stored_run), "--name", "r", "--regional-store", "s3://bkt/r"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1 and result.output.startswith(
        "error: cannot reach store s3://bkt/r: "
    )
    assert not Path("runs").exists()


@pytest.mark.parametrize("command", [["trainer"], ["region", "--name", "r"]], ids=["t", "r"])
def test_a_file_given_as_the_work_folder_is_one_line(command, stored_run):
    Path("afile").write_text("not a folder")
    args = [*command, "--store", str(stored_run)]
    refused([*args, "--workdir", "afile"], "work folder afile is a file, not a folder")
    refused([*args, "--workdir", "afile/w"], "work folder afile/w: afile is a file")


def test_a_file_given_as_the_regional_store_is_one_line(stored_run):
    Path("afile").write_text("not a store")
    args = ["region", "--store", str(stored_run), "--name", "r", "--regional-store", "afile"]
    refused(args, "afile is a file, not a store folder")
    assert not Path("runs").exists()


def test_a_region_refuses_a_bad_override_before_copying_the_run(stored_run):
    args = ["region", "--store", str(stored_run), "--name", "r", "--set", "rollout.bogus=1"]
    refused(args, "rollout.bogus: unknown key")
    assert not Path("runs").exists()


@pytest.mark.parametrize("command", [["trainer"], ["region", "--name", "r"]], ids=["t", "r"])
def test_an_invalid_stored_config_is_one_line(command, stored_run):
    open_store(str(stored_run)).put(CONFIG_KEY, b"[rollout]\nbogus = 1\n")  # an older fleetrl's
    refused([*command, "--store", str(stored_run)], "rollout.bogus: unknown key")
    assert not Path("runs").exists()


def test_the_trainer_refuses_a_stored_config_it_cannot_train(stored_run):
    # Greedy sampling: a store made before the config refused it at parse time holds it.
    open_store(str(stored_run)).put(CONFIG_KEY, b"[rollout]\ntemperature = 0\n")
    refused(["trainer", "--store", str(stored_run)], "rollout.temperature: 0 (greedy)")
    assert not (stored_run.parent / "runs").exists()  # refused before the run was copied
