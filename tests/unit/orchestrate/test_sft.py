"""`fleetrl sft` refuses bad settings with one-line errors naming the knob, before any
work (a whole tiny run: tests/integration/orchestrate)."""

import pytest
from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--steps", "0"], "sft.steps"),
        (["--lr", "0"], "sft.lr"),
        (["--hidden", "60"], "sft.hidden"),
        (["--set", "sft.layers=0"], "sft.layers"),
        (["--init", "nowhere"], "not a checkpoint directory"),
        (["--set", 'sft.plans=["fix", "improvise"]'], "choose one or more of fix, look_first"),
    ],
)
def test_sft_refuses_bad_options_cleanly(tmp_path, args, message):
    result = runner.invoke(app, ["sft", str(tmp_path / "out"), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert result.output.count("error:") == 1


def test_sft_refuses_files_where_folders_go_even_with_force(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    result = runner.invoke(app, ["sft", str(afile), "--force"])
    assert result.exit_code == 2 and "is a file, not a folder" in result.output
    result = runner.invoke(app, ["sft", str(tmp_path / "out"), "--demos-cache", str(afile)])
    assert result.exit_code == 2 and "sft.demos_cache" in result.output


def test_sft_refuses_a_non_empty_output_and_has_help(tmp_path):
    (tmp_path / "keep.txt").write_text("x")
    result = runner.invoke(app, ["sft", str(tmp_path)])
    assert result.exit_code == 2 and "--force" in result.output
    assert "demonstrations" in runner.invoke(app, ["sft", "--help"]).output
