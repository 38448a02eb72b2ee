"""`fleetrl bench learning`: RL and SFT-more from one SFT base, each evaluated at its own
temperature. One tiny but real run (a tiny SFT base, one RL step, two tasks per split)
checks the machinery and the budgets, not learning; the goals are checked on their own."""

import json
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from fleetrl.bench.learning import (
    SPLITS,
    LearningBenchError,
    check_demonstrated,
    demonstrated_tasks,
    learning_goals,
    sft_curve,
    sft_more_overrides,
)
from fleetrl.cli import app
from fleetrl.config import RunConfig, TasksSection
from fleetrl.orchestrate.sft import run_sft

runner = CliRunner()
TINY_SFT = {"steps": 2, "batch_size": 2, "copies": 0, "max_tasks": 4, "threads": 1}


def split_doc(pass_at_1: float, ci: float, recovery_rate: float) -> dict:
    passed = round(100 * pass_at_1)  # of 100 tasks, the first ones, one sample each
    return {
        "task_passes": {f"t{i:03d}": int(i < passed) for i in range(100)},
        "samples_per_task": 1,
        "pass_at_1": pass_at_1,
        "ci_low": pass_at_1 - ci,
        "ci_high": pass_at_1 + ci,
        "recovery_rate": recovery_rate,
        "recovery": recovery_rate / 2,
        "failed_edit_episodes": 10,
    }


def model(pass_at_1: float, ci: float = 0.04, recovery_rate: float = 0.1) -> dict:
    return {key: split_doc(pass_at_1, ci, recovery_rate) for key in SPLITS.values()}


def test_goals_met_when_rl_clears_both_margins_with_separated_intervals():
    goals = learning_goals(model(0.2), model(0.3, recovery_rate=0.2), model(0.25))
    heldout = goals["heldout"]
    assert heldout["rl_over_base"]["met"]  # exactly +10 points counts
    assert heldout["rl_over_base"]["intervals_separated"]
    assert heldout["rl_over_base"]["rl"] == 0.3 and heldout["rl_over_base"]["base"] == 0.2
    low, high = heldout["rl_over_base"]["gain_ci"]  # RL passes the base's tasks and 10 more
    assert 0 < low < 0.1 < high
    assert heldout["rl_over_sft_more"]["met"] and heldout["recovery_rises"]["met"]
    assert goals["met_on"] == {"heldout": True, "heldout_templates": True}
    assert goals["all_met"]


def test_goals_fail_on_overlapping_intervals_small_margins_and_flat_recovery():
    overlapping = learning_goals(model(0.2, ci=0.08), model(0.32, ci=0.08), model(0.2))
    assert not overlapping["heldout"]["rl_over_base"]["met"]  # +12 points, intervals overlap
    assert not overlapping["heldout"]["rl_over_base"]["intervals_separated"]
    assert overlapping["heldout"]["rl_over_sft_more"]["met"]  # no separation asked there
    assert not overlapping["heldout"]["recovery_rises"]["met"]  # equal rates do not rise
    close = learning_goals(model(0.1), model(0.3), model(0.27))
    assert close["heldout_templates"]["rl_over_base"]["met"]
    assert not close["heldout_templates"]["rl_over_sft_more"]["met"]
    assert close["heldout_templates"]["rl_over_sft_more"]["gain"] == pytest.approx(0.03)
    assert not close["all_met"]


def test_goals_say_which_split_falls_short():
    base, rl, sft_more = model(0.2), model(0.3, recovery_rate=0.2), model(0.25)
    rl["heldout_templates"] = split_doc(0.2, 0.04, 0.2)  # no gain where the templates are new
    goals = learning_goals(base, rl, sft_more)
    assert goals["met_on"] == {"heldout": True, "heldout_templates": False}
    assert not goals["all_met"]


def test_sft_more_continues_the_base_recipe_at_its_final_learning_rate(tmp_path):
    recipe = {"lr": 1.5e-3, "min_lr_ratio": 0.1, "batch_size": 16, "copies": 3, "plans": ["fix"]}
    recipe["max_tasks"] = 60  # a base demonstrated on part of the split continues on that part
    overrides = sft_more_overrides({"config": recipe}, tmp_path, 42.0)
    assert overrides["lr"] == pytest.approx(1.5e-4) and overrides["min_lr_ratio"] == 1.0
    assert (overrides["batch_size"], overrides["copies"], overrides["plans"]) == (16, 3, ["fix"])
    assert overrides["max_tasks"] == 60
    assert (overrides["max_seconds"], overrides["init"]) == (42.0, str(tmp_path))
    assert overrides["warmup_steps"] == 0 and overrides["val_every"] == 0
    # An sft.json that predates `copies` leaves the run configuration's value.
    older = sft_more_overrides({"config": {"lr": 1e-3, "min_lr_ratio": 0.5}}, tmp_path, 1.0)
    assert not {"copies", "plans", "max_tasks"} & older.keys()
    assert older["lr"] == pytest.approx(5e-4)


def test_sft_more_starts_at_the_rate_of_the_kept_weights(tmp_path):
    schedule = {"steps": 1001, "warmup_steps": 0, "lr": 1e-3, "min_lr_ratio": 0.1}
    # Stopped at its plateau halfway down the cosine, step 500's weights kept: the rate
    # there, halfway between lr and its floor, not the floor it never reached.
    halfway = {"config": schedule, "result": {"steps": 650, "best_step": 501}}
    assert sft_more_overrides(halfway, tmp_path, 1.0)["lr"] == pytest.approx(5.5e-4)
    # Without patience the last weights are kept (`kept_step`), not the best step's.
    last = {"config": schedule, "result": {"steps": 1001, "best_step": 501, "kept_step": 1001}}
    assert sft_more_overrides(last, tmp_path, 1.0)["lr"] == pytest.approx(1e-4)
    # Ran to the end without validation: the floor.
    finished = {"config": schedule, "result": {"steps": 1001, "best_step": None}}
    assert sft_more_overrides(finished, tmp_path, 1.0)["lr"] == pytest.approx(1e-4)
    warm = {"config": schedule | {"warmup_steps": 100}, "result": {"steps": 50}}
    assert sft_more_overrides(warm, tmp_path, 1.0)["lr"] == pytest.approx(5e-4)


def test_sft_more_continues_on_the_tasks_the_base_was_demonstrated(tmp_path):
    rl_tasks = RunConfig.model_validate({"tasks": {"tasks_dir": str(tmp_path)}})
    recorded = {"suite": "micro", "split": "train", "tasks_dir": None}
    demonstrated = demonstrated_tasks({"about": {"tasks_source": recorded}}, rl_tasks)
    assert demonstrated.model_dump() == recorded | {"skip_solved": None}
    # An sft.json that predates the record: the run's tasks, as before.
    older = demonstrated_tasks({"about": {"tasks": 440}}, rl_tasks)
    assert older.tasks_dir == str(tmp_path)
    check_demonstrated(demonstrated)
    with pytest.raises(LearningBenchError, match="the base's demonstrated tasks"):
        check_demonstrated(TasksSection(suite="micro", split="gone"))


def test_sft_curve_keeps_validation_losses_only_when_measured():
    curve = sft_curve({"result": {"steps": 50, "losses": [[25, 1.0], [50, 0.5]]}})
    assert curve == {"losses": [[25, 1.0], [50, 0.5]], "steps": 50}
    with_val = {"steps": 2, "losses": [], "val_losses": [[0, 2.0]], "best_step": 0}
    assert sft_curve({"result": with_val})["best_step"] == 0


def test_bench_learning_refuses_bad_bases_and_splits(tmp_path, tiny_checkpoint):
    args = ["bench", "learning", "--runs-dir", str(tmp_path), "--name", "x"]
    missing = runner.invoke(app, [*args, "--base", str(tmp_path / "nope")])
    assert missing.exit_code == 2 and "not a checkpoint directory" in missing.output
    no_sft = runner.invoke(app, [*args, "--base", str(tiny_checkpoint)])
    assert no_sft.exit_code == 2 and "sft.json" in no_sft.output
    split = runner.invoke(app, [*args, "--set", "tasks.split=nope"])
    assert split.exit_code == 2 and "no split 'nope'" in split.output
    chosen = runner.invoke(app, [*args, "--set", "eval.val_split=heldout-templates"])
    assert chosen.exit_code == 2 and "eval.val_split" in chosen.output
    # The default is the demo preset: its evaluation of base-slip is not another base's.
    other = runner.invoke(app, [*args, "--base", "base"])
    assert other.exit_code == 2 and "evaluated other weights" in other.output
    outputs = missing.output + no_sft.output + split.output + chosen.output + other.output
    assert "Traceback" not in outputs


@pytest.fixture(scope="module")
def tiny_sft_base(tmp_path_factory, tiny_checkpoint):
    """A tiny SFT checkpoint with both loss curves: two steps from the tiny model on four
    tasks' demonstrations (cached for SFT-more, which continues on the same ones)."""
    out = tmp_path_factory.mktemp("sft-base")
    config = RunConfig.model_validate(
        {"sft": TINY_SFT | {"init": str(tiny_checkpoint), "val_every": 1}}
    )
    run_sft(config, out, echo=lambda _line: None, progress=False)
    return out


# Three evaluations (temperature sweep, two splits each), an RL run and SFT-more as long as
# it took.
@pytest.mark.slow
def test_bench_learning_runs_rl_and_sft_more_for_the_same_wall_time(tmp_path, tiny_sft_base):
    overrides = [
        "trainer.steps=1", "trainer.groups_per_step=1", "rollout.group_size=2",
        "rollout.max_concurrent_groups=1", "trainer.dynamic_sampling=false",
        "eval.samples=2", "eval.val_samples=1", "eval.temperatures=[0.0, 1.0]",
        "eval.threads=1", "sft.threads=1", "sft.max_tasks=4",
    ]  # fmt: skip
    defaults = tmp_path / "defaults.toml"  # the built-in tree (micro), not the demo preset
    defaults.write_text("")
    argv = [sys.executable, "-m", "fleetrl.cli", "bench", "learning", "--json", "--name", "t"]
    argv += ["--base", str(tiny_sft_base), "--runs-dir", str(tmp_path), "--max-tasks", "2"]
    argv += ["--config", str(defaults)]
    for item in overrides:
        argv += ["--set", item]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout)
    assert figures == json.loads((tmp_path / "t" / "learning.json").read_text())
    for name in ("base", "rl", "sft_more"):
        for key in ("heldout", "heldout_templates"):
            doc = figures[name][key]
            for field in ("pass_at_1", "ci_low", "ci_high", "greedy", "pass_at_8"):
                assert 0.0 <= doc[field] <= 1.0, (name, key, field)
            assert doc["temperature"] in (0.0, 1.0) and set(doc["val_sweep"]) == {"0.0", "1.0"}
            assert doc["tasks"] == 2
            episodes = (tmp_path / "t" / "transcripts" / f"{name}-{key}.jsonl").read_text()
            records = [json.loads(line) for line in episodes.splitlines()]
            assert len(records) >= doc["episodes"]  # the greedy run's too, below T = 0
            assert {r["split"] for r in records} == {key.replace("_", "-")}
    budget = figures["budget"]
    assert budget["sft_more_steps"] > 0
    # SFT-more stops at the first step past RL's wall time: one tiny step is well under 5 s.
    assert budget["rl_wall_s"] <= budget["sft_more_wall_s"] <= budget["rl_wall_s"] + 5.0
    assert 0 < budget["rl_wall_s"] < budget["rl_run_s"]  # W ends at the final weights
    assert budget["sft_more_batch_size"] == TINY_SFT["batch_size"]
    expected = {"suite": "micro", "split": "train", "tasks_dir": None, "skip_solved": None}
    assert budget["sft_more_tasks"] == expected
    assert figures["sft_curve"]["val_losses"][0][0] == 0  # the base's validation curve
    assert len(figures["sft_curve"]["losses"]) >= 1
    assert isinstance(figures["goals"]["all_met"], bool)
    goals = {"rl_over_base", "rl_over_sft_more", "recovery_rises"}
    assert set(figures["goals"]["heldout"]) == goals
    over_base = figures["goals"]["heldout"]["rl_over_base"]
    assert -1.0 <= over_base["gain_ci"][0] <= over_base["gain"] <= over_base["gain_ci"][1] <= 1.0
    assert (tmp_path / "t" / "rl" / "final" / "config.json").is_file()
