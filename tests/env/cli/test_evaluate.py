"""`fleetrl eval --json` on a random model in sandboxes, its episodes written with
`--transcripts`, and a missing checkpoint."""

import json

from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.envs.tasks.suites import load_tasks

runner = CliRunner()


def test_eval_json_on_a_random_model(tmp_path):
    model_dir = tmp_path / "m"
    assert (
        runner.invoke(
            app, ["model", "init", str(model_dir), "--layers", "1", "--hidden", "64"]
        ).exit_code
        == 0
    )
    args = [
        "eval",
        str(model_dir),
        "--set",
        "eval.max_tasks=2",
        # At a given temperature nothing is chosen, so the val split is never read: a task
        # folder without one (`fleetrl tasks make` on a small repository) still evaluates.
        "--set",
        "eval.val_split=absent",
        "--episodes",
        "4",
        "--threads",
        "1",
    ]
    transcripts = tmp_path / "episodes.jsonl"
    result = runner.invoke(app, [*args, "--transcripts", str(transcripts), "--json"])
    assert result.exit_code == 0, result.output
    figures = json.loads(result.output)
    assert figures["episodes"] == 4 and figures["tasks"] == 2
    assert figures["pass_at_1"] == 0.0 and 0.0 == figures["ci_low"] < figures["ci_high"] < 1.0
    # Every episode of the reported run (T = 1, 2 per task) and of the greedy run (1 per
    # task), each with the conversation the model saw, starting with its task's statement.
    records = [json.loads(line) for line in transcripts.read_text().splitlines()]
    statements = {t.instance_id: t.problem_statement for t in load_tasks("micro", split="heldout")}
    assert sorted(r["temperature"] for r in records) == [0.0] * 2 + [1.0] * 4
    for record in records:
        assert record["split"] == "heldout" and record["reward"] == 0.0
        assert record["turns"] >= 1 and record["finish_reason"]
        assert statements[record["task_id"]] in record["windows"][0]
    nowhere = runner.invoke(app, [*args, "--transcripts", str(tmp_path / "no" / "e.jsonl")])
    assert nowhere.exit_code == 2 and "no directory" in nowhere.output
    both = runner.invoke(app, ["eval", "--suite", "micro", "--tasks", str(tmp_path)])
    assert both.exit_code == 2 and "not both" in both.output
    missing = runner.invoke(app, ["eval", str(tmp_path / "none")])
    assert missing.exit_code == 2 and "not a checkpoint" in missing.output
