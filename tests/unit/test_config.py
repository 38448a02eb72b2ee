"""The run configuration: defaults that run, and errors that name the key."""

import pytest

from fleetrl.config import ConfigError, dump_config, load_config, parse_overrides


def test_defaults_are_valid_and_round_trip(tmp_path):
    config = load_config()
    assert config.model.path == "base" and config.tasks.split == "train"
    path = tmp_path / "run.toml"
    path.write_text(dump_config(config))
    assert load_config(path) == config


def test_file_and_overrides_merge(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('name = "a"\n[trainer]\nlr = 1e-3\nsteps = 5\n')
    config = load_config(path, parse_overrides(["trainer.steps=7", "rollout.temperature=0.5"]))
    assert (config.name, config.trainer.lr, config.trainer.steps) == ("a", 1e-3, 7)
    assert config.rollout.temperature == 0.5
    assert parse_overrides(["model.path=runs/x/final"]) == {"model": {"path": "runs/x/final"}}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[trainer]\nlrr = 1\n", "trainer.lrr: unknown key"),
        ('[trainer]\nlr = "fast"\n', "trainer.lr: Input should be a valid number"),
        ("[trainer]\nsteps = 0\n", "trainer.steps: Input should be greater than or equal to 1"),
        ('[rollout]\nsandbox_backend = "docker"\n', "rollout.sandbox_backend"),
        ('[eval]\nsplit = "train"\n', "eval.split is the training split"),
        ("[trainer\n", "invalid TOML"),
    ],
)
def test_bad_configs_name_the_key(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_config(path)


def test_missing_file_and_bad_override(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "none.toml")
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["trainer.lr"])
