"""Evaluation statistics, the temperature rule and the key results are kept under;
evaluating a policy with the real verifier is in tests/env/rollout."""

import json

import pytest

from fleetrl.config import ConfigError
from fleetrl.config_files import load_config
from fleetrl.envs.tasks.suites import load_tasks
from fleetrl.orchestrate import local
from fleetrl.rollout.evaluate import evaluation_cache_path, pick_temperature, sweep_tasks
from fleetrl.rollout.stats import (
    EvalError,
    EvalResult,
    bootstrap_interval,
    paired_gain,
    pass_at_k,
    summarise,
    task_rates,
    wilson_interval,
)
from fleetrl.types import Trajectory


def test_bootstrap_interval_contains_the_mean_and_is_deterministic():
    per_task = [0.0, 0.25, 0.5, 1.0, 1.0, 0.0, 0.75, 0.5, 0.25, 1.0]
    low, high = bootstrap_interval(per_task)
    assert low < sum(per_task) / len(per_task) < high
    assert bootstrap_interval(per_task, seed=0) == (low, high)
    assert bootstrap_interval(per_task, seed=1) != (low, high)
    narrower = bootstrap_interval(per_task, level=0.5)
    assert low < narrower[0] < narrower[1] < high


def test_bootstrap_over_tasks_is_wider_than_a_binomial_over_correlated_episodes():
    # 20 tasks x 8 samples, every task all-pass or all-fail: 160 episodes but 20 facts.
    per_task = [1.0] * 10 + [0.0] * 10
    low, high = bootstrap_interval(per_task)
    binomial_low, binomial_high = wilson_interval(80, 160)
    assert high - low > 1.5 * (binomial_high - binomial_low)
    assert low < 0.5 < high


def test_a_paired_gain_resolves_what_two_separate_intervals_cannot():
    # 200 tasks: the base passes 120; the trained model the same 120 and 12 more.
    before = {f"t{i}": float(i < 120) for i in range(200)}
    after = {f"t{i}": float(i < 132) for i in range(200)}
    gain, low, high = paired_gain(after, before)
    assert gain == pytest.approx(0.06) and 0 < low < gain < high
    assert (
        bootstrap_interval(list(after.values()))[0] < bootstrap_interval(list(before.values()))[1]
    )
    assert paired_gain(after, before) == (gain, low, high)  # deterministic for a seed
    with pytest.raises(EvalError, match="same tasks"):
        paired_gain(after, {"t0": 1.0})


def test_task_rates_divide_by_the_samples_per_task():
    document = {"task_passes": {"a": 8, "b": 2, "c": 0}, "samples_per_task": 8}
    assert task_rates(document) == {"a": 1.0, "b": 0.25, "c": 0.0}


def test_bootstrap_never_claims_certainty_when_every_task_scored_the_same():
    assert bootstrap_interval([0.0, 0.0]) == wilson_interval(0, 2)
    assert bootstrap_interval([0.0, 0.0])[1] > 0.5
    assert bootstrap_interval([1.0] * 5)[1] == 1.0 and bootstrap_interval([1.0] * 5)[0] < 1
    assert bootstrap_interval([]) == (0.0, 1.0)


def test_pass_at_k_hand_values():
    assert pass_at_k(8, 1, 8) == 1.0
    assert pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(2, 1, 1) == 0.5
    assert pass_at_k(8, 2, 2) == pytest.approx(1 - (6 * 5) / (8 * 7))
    assert pass_at_k(4, 4, 1) == 1.0
    # Fewer samples than k: the plug-in estimate, biased low; exact for greedy (n = 1).
    assert pass_at_k(2, 1, 8) == pytest.approx(1 - 0.5**8)
    assert pass_at_k(1, 1, 8) == 1.0 and pass_at_k(1, 0, 8) == 0.0
    with pytest.raises(ValueError):
        pass_at_k(2, 3, 1)


def episode(task: str, reward: float, failed_edits: int = 0) -> Trajectory:
    return Trajectory(
        task, [], reward, "finish", 2, 2, failed_edits, 0.1, failed_edits=failed_edits
    )


def test_summarise_counts_per_task_pass_at_k_and_recovery():
    trajectories = [
        episode("a", 1.0, failed_edits=1),
        episode("a", 1.0),
        episode("b", 0.0, failed_edits=2),
        episode("b", 1.0, failed_edits=1),
        episode("c", 0.0),
        episode("c", 0.0),
    ]
    result = summarise(trajectories, 3, 1.0, temperature=0.5)
    assert result.pass_at_1 == pytest.approx(0.5) and result.samples_per_task == 2
    assert (result.temperature, result.episodes, result.tasks) == (0.5, 6, 3)
    assert result.task_passes == {"a": 2, "b": 1, "c": 0}
    assert result.pass_at_k == {2: pytest.approx(2 / 3)}
    assert result.ci_low < 0.5 < result.ci_high
    assert result.failed_edit_episodes == 3
    assert result.recovery == pytest.approx(2 / 6) and result.recovery_rate == pytest.approx(2 / 3)
    again = EvalResult.from_json(result.to_json())
    assert again == result
    empty = summarise([], 0, 0.0)
    assert (empty.pass_at_1, empty.recovery_rate, empty.pass_at_k) == (0.0, 0.0, {})


def result_at(pass_at_1: float) -> EvalResult:
    return EvalResult(pass_at_1, 0.0, 1.0, 10, 10, 1.0, temperature=0.0, samples_per_task=1)


def test_pick_temperature_takes_the_best_pass_at_1_and_the_lower_on_ties():
    sweep = {0.0: result_at(0.2), 0.3: result_at(0.35), 0.5: result_at(0.3), 1.0: result_at(0.1)}
    assert pick_temperature(sweep) == 0.3
    sweep[0.7] = result_at(0.35)
    assert pick_temperature(sweep) == 0.3
    assert pick_temperature({1.0: result_at(0.0), 0.0: result_at(0.0)}) == 0.0


def test_eval_config_defaults_and_the_val_split_rule():
    section = load_config().eval
    assert tuple(section.temperatures) == (0.0, 0.3, 0.5, 0.7, 1.0)
    assert (section.val_split, section.samples, section.val_samples) == ("val", 8, 1)
    assert section.best_temperature and section.episodes == 100
    with pytest.raises(ConfigError, match=r"eval\.val_split is the reported split"):
        load_config(overrides={"eval": {"val_split": "heldout"}})
    with pytest.raises(ConfigError, match=r"eval\.val_split is the training split"):
        load_config(overrides={"eval": {"val_split": "train"}})
    with pytest.raises(ConfigError, match=r"eval\.temperatures"):
        load_config(overrides={"eval": {"temperatures": [-0.5]}})


def test_the_temperature_sweep_runs_on_the_first_val_tasks():
    val = [task.instance_id for task in load_tasks(suite="micro", split="val")]
    assert len(val) == 310
    swept = [task.instance_id for task in sweep_tasks(load_config())]
    assert swept == val[:62]  # one instance of each template/bug pair
    everything = load_config(overrides={"eval": {"sweep_tasks": 0}})
    assert [task.instance_id for task in sweep_tasks(everything)] == val


def test_fleetrl_eval_refuses_to_choose_the_temperature_on_the_reported_split():
    from typer.testing import CliRunner

    from fleetrl.cli import app

    runner = CliRunner()
    on_val = runner.invoke(app, ["eval", "base", "--split", "val", "--best-temperature"])
    assert on_val.exit_code == 2 and "report another --split" in on_val.output
    both = runner.invoke(app, ["eval", "--best-temperature", "--temperature", "0.5"])
    assert both.exit_code == 2 and "drop --temperature" in both.output
    budgets = runner.invoke(app, ["eval", "--samples", "2", "--episodes", "4"])
    assert budgets.exit_code == 2 and "not both" in budgets.output
    assert "Traceback" not in on_val.output + both.output + budgets.output


def test_the_end_of_run_evaluation_is_kept_under_the_one_key(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEETRL_CACHE", str(tmp_path))
    config = load_config(overrides={"eval": {"max_tasks": 2}})
    path = evaluation_cache_path("w" * 64, config)
    assert path.parent == tmp_path / "evals"
    # it moves with what the result depends on, and with nothing else
    other = load_config(overrides={"eval": {"max_tasks": 2, "episodes": 7}})
    assert evaluation_cache_path("w" * 64, other) != path != evaluation_cache_path("v" * 64, config)
    trained = load_config(overrides={"eval": {"max_tasks": 2}, "trainer": {"lr": 1e-3}})
    assert evaluation_cache_path("w" * 64, trained) == path
    # `fleetrl train` reads back what the key names, without evaluating again
    kept = EvalResult(0.25, 0.1, 0.5, episodes=4, tasks=2, duration_s=1.0, temperature=0.0,
                      samples_per_task=2)  # fmt: skip
    path.parent.mkdir()
    path.write_text(json.dumps(kept.to_json()))
    monkeypatch.setattr(local, "weights_digest", lambda checkpoint: "w" * 64)
    monkeypatch.setattr(local, "evaluate_checkpoint", lambda *a, **k: pytest.fail("evaluated"))
    assert local.evaluate(tmp_path / "model", config, cache=True) == kept
