"""The run configuration every command reads: --config and --set, bad keys in one line."""

from typer.testing import CliRunner

from fleetrl.cli import app

runner = CliRunner()


def test_run_commands_read_one_config_tree(tmp_path):
    # train, eval, sft and bench pipeline take the same --config file and --set overrides,
    # and name the key of a bad value in a one-line error before doing any work.
    config = tmp_path / "run.toml"
    config.write_text("[trainer]\nlr = -1.0\n")
    for command in (["train"], ["eval"], ["sft", str(tmp_path / "out")], ["bench", "pipeline"]):
        options = [str(config)] if command == ["train"] else ["--config", str(config)]
        from_file = runner.invoke(app, [*command, *options])
        assert from_file.exit_code == 2, (command, from_file.output)
        assert "trainer.lr" in from_file.output and "Traceback" not in from_file.output
        unknown = runner.invoke(app, [*command, "--set", "harness.max_turnz=3"])
        assert unknown.exit_code == 2, (command, unknown.output)
        assert "harness.max_turnz: unknown key" in unknown.output
