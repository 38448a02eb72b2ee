"""write_report: renders from full, partial and empty runs into one self-contained page."""

import json
import math
import random
import re

import pytest

from fleetrl.observe.metrics import MetricsLogger
from fleetrl.observe.records import EvalRecord, SyncRecord, TrainRecord
from fleetrl.observe.report import SECTIONS, write_report

CONFIG = '[run]\nname = "demo"\nstore = "s3://bucket/runs/demo"  # <not html>\n'


def make_run(run_dir, steps=200, seed=0):
    """A synthetic run logged as typed records (every field the report reads), plus config
    and evals; step 1 had no informative group, so it has no step metrics."""
    rng = random.Random(seed)
    with MetricsLogger(run_dir / "metrics.jsonl") as logger:
        for step in range(1, steps + 1):
            progress = step / steps
            pass_rate = min(1.0, max(0.0, 0.3 + 0.3 * progress + rng.gauss(0, 0.08)))
            hist = [rng.randint(20, 40), rng.randint(5, 20), rng.randint(0, 8), rng.randint(0, 2)]
            step_metrics = {
                "mismatch_kl_k3": 1e-3 * (1 + rng.random()),
                "mismatch_abs_logprob": 0.02 + 0.01 * rng.random(),
                "correction_truncated_frac": 0.01 * rng.random(),
                "clip_frac": 0.05 * rng.random(),
                "loss": rng.gauss(0, 0.1),
                "grad_norm": 0.5 + rng.random(),
                "entropy": 0.8 - 0.3 * progress,
            }
            record = TrainRecord(
                **(step_metrics if step > 1 else {}),
                version=step,
                reward=pass_rate - 0.05,
                pass_rate=pass_rate,
                staleness_hist=hist,
                staleness_mean=sum(i * c for i, c in enumerate(hist)) / sum(hist),
                dropped_samples=0,
                skipped_groups=1,
                wait_s=0.5 * rng.random(),
                forward_backward_s=2.0 + 0.2 * rng.random(),
                publish_s=0.3,
                samples_per_s=8 + rng.gauss(0, 1),
                tokens_per_s=4000 + rng.gauss(0, 300),
                trainer_idle_frac=0.2 + 0.1 * rng.random(),
                output_scale=1.3 + 0.4 * progress,
                tool_errors_mean=0.1,
                incarnation=1,
                group_ids=[f"region-0/{step}"],
                skipped_group_ids=[],
                dropped_group_ids=[],
                pending_group_ids=[],
            )
            logger.log_record(step, record)
            full = 50_000_000
            sync = SyncRecord(
                sync_bytes=full if step % 10 == 0 else int(full * 0.04),
                full_bytes=full,
                unchanged_frac=0.96,
                sync_pause_ms=30 + 10 * rng.random(),
            )
            logger.log_record(step, sync)
            if step % 50 == 0 or step == 1:
                p = 0.3 + 0.3 * progress
                half = 1.96 * math.sqrt(p * (1 - p) / 200)
                evaluation = EvalRecord(
                    pass_at_1=p,
                    ci_low=p - half,
                    ci_high=p + half,
                    episodes=200,
                    tasks=50,
                    duration_s=60.0,
                    mean_tool_errors=0.1,
                    model=f"step {step}",
                )
                logger.log_record(step, evaluation)
    (run_dir / "config.toml").write_text(CONFIG)
    evals = {
        "base": {"pass_at_1": 0.3, "ci_low": 0.24, "ci_high": 0.37, "n": 200},
        "final": {"pass_at_1": 0.6, "ci_low": 0.53, "ci_high": 0.66, "n": 200},
    }
    (run_dir / "eval.json").write_text(json.dumps(evals))


def images(page):
    return len(re.findall(r"<img\b", page)) + len(re.findall(r"<svg\b", page))


def assert_self_contained(page):
    links = re.findall(r"""(?:src|href)\s*=\s*["']([^"']*)""", page)
    assert links and not [link for link in links if "://" in link or link.startswith("//")]


def test_full_run_renders_every_section(tmp_path):
    run_dir = tmp_path / "demo"
    make_run(run_dir)
    out = write_report(run_dir)
    assert out == run_dir / "report.html"
    page = out.read_text()
    for section in SECTIONS:
        assert f"<h2>{section.title}</h2>" in page
    assert images(page) == page.count("<figcaption>") == len(SECTIONS)
    assert_self_contained(page)
    # Summary: evals from eval.json, sync totals, final reward; config shown escaped.
    assert "base: 0.300 [0.240, 0.370], n=200 → final: 0.600 [0.530, 0.660]" in page
    assert "(Δ +0.300)" in page
    assert "over 200 versions" in page
    assert "mean of last 10 steps" in page
    assert "# &lt;not html&gt;" in page and "s3://bucket/runs/demo" in page


def test_partial_run_shows_not_logged(tmp_path):
    run_dir = tmp_path / "partial"
    with MetricsLogger(run_dir / "metrics.jsonl") as logger:
        for step in range(5):
            logger.log("train", step, {"reward": 0.1 * step, "clip_frac": 0.01})
        logger.log("eval", 4, {"pass_at_1": 0.4})  # no CI: a plain point
        logger.log("eval", 4, {"pass_at_1": float("nan")})  # not plottable, must not break
    page = write_report(run_dir).read_text()
    # Reward (reward + eval) and mismatch (clip_frac) have data; the rest say not logged.
    assert images(page) == 2
    assert page.count("not logged (") == len(SECTIONS) - 2
    assert "no config.toml" in page and "no eval.json" in page
    assert "step 0: 0.400" not in page  # one eval point: no base-vs-final comparison
    assert "step 4: 0.400" in page
    assert_self_contained(page)


def test_empty_run_dir_renders(tmp_path):
    page = write_report(tmp_path).read_text()
    assert images(page) == 0
    assert "no metrics.jsonl records" in page


def test_bad_eval_json_is_reported_not_fatal(tmp_path):
    (tmp_path / "eval.json").write_text("{broken")
    assert "eval.json is not valid JSON" in write_report(tmp_path).read_text()


def test_resumed_steps_supersede_replayed_ones(tmp_path):
    with MetricsLogger(tmp_path / "metrics.jsonl") as logger:
        for step in (1, 2, 3, 4):
            logger.log("train", step, {"reward": 0.0})
    with MetricsLogger(tmp_path / "metrics.jsonl") as logger:
        for step in (3, 4, 5):  # resumed from the step-2 checkpoint
            logger.log("train", step, {"reward": 1.0})
    page = write_report(tmp_path).read_text()
    assert "5 (5 logged)" in page
    assert "1.000 (mean of last 5 steps)" not in page  # steps 1-2 reward 0, 3-5 reward 1
    assert "0.600 (mean of last 5 steps)" in page


def test_missing_run_dir_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path / "nope")


def test_a_second_run_is_compared_on_shared_axes(tmp_path):
    make_run(tmp_path / "replay", steps=20, seed=0)
    make_run(tmp_path / "no-replay", steps=20, seed=1)
    page = write_report(tmp_path / "replay", compare=tmp_path / "no-replay").read_text()
    assert "<h2>Compared: replay and no-replay</h2>" in page
    assert page.index("id='compare'") < page.index("id='reward'")
    assert images(page) == len(SECTIONS) + 1
    assert_self_contained(page)


def test_summaries_before_and_after_training_are_shown_with_the_facts_kept(tmp_path):
    (tmp_path / "summaries.json").write_text(
        json.dumps(
            {
                "tasks": [{"task_id": "long-heldout-0000", "facts": ["bb = 76", "srh"]}],
                "base": [{"summaries": ["x.py has `bb = 7`"], "kept": [], "reward": 0.0}],
                "final": [{"summaries": ["x.py has `bb = 76`; <srh>"], "kept": ["bb = 76", "srh"]}],
            }
        )
    )
    page = write_report(tmp_path).read_text()
    section = page[page.index("Summaries before and after training") :]
    assert "long-heldout-0000" in section and "<code>bb = 76</code>" in section
    assert "<b>base</b>: 0/2 facts kept" in section and "<b>final</b>: 2/2 facts kept" in section
    assert "&lt;srh&gt;" in section  # the model's text is escaped


def test_no_summaries_no_section(tmp_path):
    assert "Summaries before and after" not in write_report(tmp_path).read_text()
