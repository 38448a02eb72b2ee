"""Real-time RL from the command line, as an operator runs it: `fleetrl run create` an
online run, `fleetrl serve --store` it (a subprocess on a free port), sessions rewarded
through POST /v1/feedback land in the run's channel, the served version is followed as
the gate (here: serve_version) moves it and `fleetrl rollback` moves it back."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx
import torch

from fleetrl.orchestrate.run import read_run_config
from fleetrl.store.objectstore import open_store
from fleetrl.store.serving import history, serve_version, served_version
from fleetrl.store.trajectories import TrajectoryChannel
from fleetrl.store.weights import WeightStore, WeightStoreOptions

PROMPT = {"prompt_ids": [1, 2, 3, 4], "sampling": {"temperature": 0, "max_tokens": 4}}


def fleetrl(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "fleetrl.cli", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=cwd)


def one_line_error(done: subprocess.CompletedProcess[str], words: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and words in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def bound_url(process: subprocess.Popen[str], stdout: Path, start_s: float = 60) -> str:
    """The URL in `fleetrl serve`'s start line (it names the port 0 was bound to)."""
    deadline = time.monotonic() + start_s
    while "http://" not in stdout.read_text():
        assert process.poll() is None, f"fleetrl serve exited {process.returncode}"
        assert time.monotonic() < deadline, "fleetrl serve printed no start line"
        time.sleep(0.1)
    line = next(x for x in stdout.read_text().splitlines() if "http://" in x)
    url = line.split("http://", 1)[1].split()[0]
    return f"http://{url}"


def health(url: str) -> dict:
    response = httpx.get(f"{url}/health", timeout=5)
    assert response.status_code == 200, response.text
    return response.json()


def wait_for_version(url: str, version: int, within_s: float = 10) -> None:
    deadline = time.monotonic() + within_s
    while (held := health(url)["version"]) != version:
        assert time.monotonic() < deadline, f"still version {held}, not {version}"
        time.sleep(0.2)


def greedy(url: str) -> dict:
    """A greedy completion of a fixed prompt: its tokens, logprobs and versions."""
    response = httpx.post(f"{url}/generate", json=PROMPT, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def test_serve_a_run_record_feedback_follow_and_roll_back(tmp_path, tiny_checkpoint):
    store_dir = tmp_path / "store"
    created = fleetrl(
        "run", "create", "--store", str(store_dir), "--set", f"model.path={tiny_checkpoint}",
        "--set", "trainer.mode=online", cwd=tmp_path,
    )  # fmt: skip
    assert created.returncode == 0, created.stdout + created.stderr
    one_line_error(fleetrl("serve", cwd=tmp_path), "--store")
    store = open_store(str(store_dir))

    stdout, stderr = tmp_path / "serve.out", tmp_path / "serve.err"
    command = [sys.executable, "-m", "fleetrl.cli", "serve", "--store", str(store_dir)]
    command += ["--port", "0", "--threads", "1", "--workdir", str(tmp_path / "serving")]
    with stdout.open("w") as out, stderr.open("w") as err:
        process = subprocess.Popen(command, stdout=out, stderr=err, text=True, cwd=tmp_path)
    try:
        url = bound_url(process, stdout)
        assert url.rsplit(":", 1)[1] != "0"
        wait_for_version(url, 0)
        at_base = greedy(url)
        assert set(at_base["versions"]) == {0}

        # A session, rewarded through /v1/feedback: a group of one in the run's channel.
        chat = {"messages": [{"role": "user", "content": "Fix calc.py"}], "max_tokens": 3}
        reply = httpx.post(f"{url}/v1/chat/completions", json={**chat, "user": "s1"}, timeout=60)
        assert reply.status_code == 200, reply.text
        body = {"session_id": "s1", "reward": 0.75, "task_id": "calc"}
        response = httpx.post(f"{url}/v1/feedback", json=body, timeout=30)
        assert response.status_code == 200 and response.json()["sent"] is True, response.text
        [record] = TrajectoryChannel(store).read_new({})
        [trajectory] = record.trajectories
        assert trajectory.reward == 0.75 and trajectory.task_id == "calc"
        sampled = reply.json()["choices"][0]["token_ids"]
        prompt = reply.json()["prompt_token_ids"]
        assert trajectory.segments[0].token_ids == prompt + sampled

        # The gate passes version 1: every server swaps it in.
        config = read_run_config(store)
        options = WeightStoreOptions(
            config.store.full_every, publish_dtype=config.store.publish_dtype
        )
        weights = WeightStore(store, options)
        g = torch.Generator().manual_seed(0)
        perturbed = {
            k: v.float() + 0.05 * torch.randn(v.shape, generator=g)
            for k, v in weights.fetch(0).tensors.items()
        }
        weights.publish(1, perturbed)
        serve_version(store, 1, "gate")
        wait_for_version(url, 1)
        at_one = greedy(url)
        assert set(at_one["versions"]) == {1} and at_one["logprobs"] != at_base["logprobs"]

        # A version never served cannot be rolled back to: one line, nothing changes.
        one_line_error(fleetrl("rollback", "--store", str(store_dir), "--to", "5", cwd=tmp_path),
                       "version 5 cannot be rolled back to")  # fmt: skip
        assert served_version(store) == 1
        rolled = fleetrl("rollback", "--store", str(store_dir), "--to", "0", cwd=tmp_path)
        assert rolled.returncode == 0, rolled.stdout + rolled.stderr
        assert "serving version 0 (was 1)" in rolled.stdout
        assert [(c.version, c.by) for c in history(store)] == [(1, "gate"), (0, "rollback")]
        wait_for_version(url, 0)
        back = greedy(url)
        assert back["token_ids"] == at_base["token_ids"] and back["logprobs"] == at_base["logprobs"]
        assert process.poll() is None

        # A serving process started (or restarted) while version 1 is served answers its
        # very first request with version 1, never with the base it loads first.
        serve_version(store, 1, "gate")
        second_out = tmp_path / "second.out"
        command[-1] = str(tmp_path / "second")
        with second_out.open("w") as out:
            second = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, text=True)
        assert set(greedy(bound_url(second, second_out))["versions"]) == {1}
    finally:
        for started in (process, locals().get("second")):
            if started is None:
                continue
            started.terminate()
            try:
                started.wait(timeout=30)
            except subprocess.TimeoutExpired:
                started.kill()
                started.wait()
    assert "Traceback" not in stderr.read_text(), stderr.read_text()
