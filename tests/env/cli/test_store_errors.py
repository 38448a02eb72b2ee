"""Every command that opens a run's store ends in one line and exit code 2, never a
traceback, when the store refuses it: wrong S3 credentials, a key without write access, an
S3 bucket that does not exist (on SeaweedFS, in this process), and a local folder whose
permissions refuse the user (a real `fleetrl` process run as user nobody)."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import fsspec
import pytest
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.store.objectstore import open_store
from fleetrl.store.run import CONFIG_KEY
from tests.env.store.conftest import KEY, READER_KEY, READER_SECRET, SECRET, as_nobody, locked_store

CHECK = "(check the credentials and the bucket's policy)"


def commands(url: str, folder: Path) -> dict[str, list[str]]:
    """Each command that opens the store at `url` (work folders under `folder`)."""
    return {
        "status": ["status", "--store", url],
        "trainer": ["trainer", "--store", url, "--workdir", str(folder / "trainer")],
        "region": ["region", "--store", url, "--name", "r", "--workdir", str(folder / "r")],
        "run-create": ["run", "create", "--store", url],
        "serve-record": ["serve", "base", "--record", "--store", url],
        "train": ["train", "--runs-dir", str(folder / "runs"), "--set", f"store.url={url}"],
    }


COMMANDS = list(commands("", Path()))


def one_line(exit_code: int, output: str, line: str) -> None:
    """The command ended with exactly `error: LINE` and exit code 2."""
    assert "Traceback" not in output, output
    assert (exit_code, output) == (2, f"error: {line}\n")


@pytest.fixture
def aws_env(s3_server, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The AWS_* variables of a user of the session's SeaweedFS; a test sets the key."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server.endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    s3 = fsspec.get_filesystem_class("s3")
    s3.clear_instance_cache()  # a cached filesystem keeps the credentials it was made with
    yield
    s3.clear_instance_cache()


@pytest.mark.parametrize("command", COMMANDS)
def test_wrong_s3_credentials(command, s3_server, aws_env, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong")
    url = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    result = CliRunner().invoke(app, commands(url, tmp_path)[command])
    one_line(result.exit_code, result.output, f"store {url}: read access denied {CHECK}")


@pytest.mark.parametrize("command", COMMANDS)
def test_an_s3_bucket_that_does_not_exist(command, aws_env, tmp_path):
    bucket = f"missing-{uuid.uuid4().hex[:12]}"
    url = f"s3://{bucket}/run"
    result = CliRunner().invoke(app, commands(url, tmp_path)[command])
    one_line(result.exit_code, result.output, f"store {url}: bucket '{bucket}' does not exist")


def test_run_create_with_a_key_that_may_only_read(s3_server, aws_env, monkeypatch, tmp_path):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", READER_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", READER_SECRET)
    url = f"s3://{s3_server.bucket}/{uuid.uuid4().hex}"
    result = CliRunner().invoke(app, commands(url, tmp_path)["run-create"])
    one_line(result.exit_code, result.output, f"store {url}: write access denied {CHECK}")


def test_a_regional_store_whose_bucket_does_not_exist(aws_env, tmp_path):
    store = open_store(str(tmp_path / "store"))  # a run: the default config, a stand-in base
    store.put(CONFIG_KEY, b"")
    store.put("run/base/config.json", b"{}")
    regional = f"s3://missing-{uuid.uuid4().hex[:12]}/west"
    args = commands(str(tmp_path / "store"), tmp_path)["region"]
    result = CliRunner().invoke(app, [*args, "--regional-store", regional])
    bucket = regional.split("/")[2]
    one_line(result.exit_code, result.output, f"store {regional}: bucket '{bucket}' does not exist")
    assert not (tmp_path / "r").exists()  # refused before the run was copied


# -- a local folder that refuses the user: `fleetrl` run as user nobody ---------------------


@pytest.mark.parametrize("command", COMMANDS)
def test_a_local_store_the_user_may_not_read(command, shared_dir):
    store = locked_store(shared_dir)
    args = commands(str(store), shared_dir / "home")[command]
    done = as_nobody([sys.executable, "-m", "fleetrl.cli", *args], shared_dir)
    line = f"store {store}: permission denied reading {store}/run/config.toml"
    one_line(done.returncode, done.stdout + done.stderr, line)


@pytest.mark.parametrize("command", ["run-create", "train"])
def test_a_local_store_the_user_may_not_write(command, shared_dir):
    readonly = shared_dir / "readonly"
    readonly.mkdir(mode=0o555)
    store = readonly / "store"
    args = commands(str(store), shared_dir / "home")[command]
    done = as_nobody([sys.executable, "-m", "fleetrl.cli", *args], shared_dir)
    one_line(
        done.returncode,
        done.stdout + done.stderr,
        f"store {store}: permission denied writing {store}",
    )
