"""`fleetrl report`: the HTML report of a run directory, and a clean refusal."""

from typer.testing import CliRunner

from fleetrl.cli import app

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
