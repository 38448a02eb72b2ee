"""`fleetrl bench record`: two real `fleetrl serve` processes (one with --record) on the tiny
model, two sessions of two turns (one round) through the openai client, one of which drops
its history."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_bench_record_reports_both_servers_and_what_was_recorded(tiny_checkpoint):
    argv = ["bench", "record", "--json", "--model", str(tiny_checkpoint), "--sessions", "2"]
    argv += ["--turns", "2", "--rounds", "1", "--max-tokens", "8", "--threads", "1"]
    result = runner.invoke(app, [*argv, "--rewrite-share", "0.5"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    for arm in ("plain", "record"):
        assert figures[f"{arm}_requests"] == 2 * 2  # sessions x turns x rounds
        assert 0 < figures[f"{arm}_p50_ms"] <= figures[f"{arm}_p99_ms"]
    for q in (50, 99):
        ratio = figures[f"record_p{q}_ms"] / figures[f"plain_p{q}_ms"]
        assert figures[f"p{q}_ratio"] == ratio
    # Every timed turn of the record arm was recorded, none went unrecorded.
    assert figures["recorded_sessions"] == 2 and figures["recorded_turns"] == 2 * 2
    assert figures["unrecorded_requests"] == 0
    # One session of the two dropped its first exchange: one new segment.
    assert figures["rewritten_sessions"] == figures["rewritten_turns"] == 1
    assert figures["new_segments"] == 1 and figures["rewritten_share"] == 0.5
    assert figures["segments_per_session_mean"] == 1.5
    assert figures["view_bytes_per_session_median"] > figures["stored_bytes_per_session_median"]
    assert figures["stored_bytes_per_session_median"] > 0
    assert figures["record_reply_tokens_mean"] > 0 and figures["plain_prompt_tokens_mean"] > 0
    # The opening, two replies, the results after the first.
    assert figures["tokens_per_session_median"] > 2 * 8 + 20


def test_bench_record_reports_a_server_that_cannot_start(tmp_path):
    (tmp_path / "config.json").write_text("{}")  # looks like a checkpoint, is not one
    result = runner.invoke(app, ["bench", "record", "--model", str(tmp_path), "--rounds", "1"])
    assert result.exit_code == 2, result.output
    assert "server exited at start-up" in result.output and "Traceback" not in result.output


def test_bench_record_inside_mini_swe_agent_counts_what_it_rewrote(tiny_checkpoint):
    # The tiny model's replies are never one bash block: mini-swe-agent drops each from the
    # history it sends back, so every turn after the first is a rewrite.
    argv = ["bench", "record", "--json", "--harness", "mini-swe-agent", "--tasks", "1"]
    argv += ["--model", str(tiny_checkpoint), "--threads", "1", "--set", "harness.max_turns=3"]
    argv += ["--set", "harness.max_reply_tokens=16"]
    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["episodes"] == figures["recorded_sessions"] == 1
    assert figures["recorded_turns"] == figures["turns_per_episode_mean"] >= 2
    assert figures["rewritten_sessions"] == 1 and figures["rewritten_share"] == 1.0
    assert figures["new_segments"] == figures["segments_per_session_mean"] - 1
    assert figures["stored_bytes_per_session_median"] > 0
    assert figures["unrecorded_requests"] == 0
