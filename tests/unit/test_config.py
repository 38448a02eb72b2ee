"""The run configuration: defaults that run, and errors that name the key."""

import importlib.util
from pathlib import Path

import pytest

from fleetrl.config import ConfigError, check_trainable
from fleetrl.config_files import PRESETS, dump_config, load_config, parse_overrides, with_overrides
from fleetrl.envs.tasks.suites import load_tasks, training_tasks
from fleetrl.model.checkpoint import resolve_checkpoint


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
        ("[trainer]\nminibatches = 0\n", "trainer.minibatches: Input should be greater"),
        ("[trainer]\nmax_skip_batches = 0\n", "trainer.max_skip_batches: Input should be"),
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
    with pytest.raises(
        ConfigError,
        match=r"config file nodemo does not exist \(shipped presets: demo, long, mini-swe-agent\)",
    ):
        load_config(Path("nodemo"))
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        parse_overrides(["trainer.lr"])
    with pytest.raises(ConfigError, match=r"trainer\.lr: trainer was set to a value"):
        parse_overrides(["trainer=1", "trainer.lr=1"])
    with pytest.raises(ConfigError, match="is a folder, not a TOML file"):
        load_config(tmp_path)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        load_config(binary)


@pytest.mark.parametrize("name", ["../escape", "", "a/b", ".hidden", "two words"])
def test_a_run_name_names_one_folder_inside_runs(name):
    with pytest.raises(ConfigError, match="name: String should match pattern"):
        with_overrides(load_config(), {"name": name})
    assert with_overrides(load_config(), {"name": "s35-bench_2.b"}).name == "s35-bench_2.b"


def test_greedy_rollouts_evaluate_but_do_not_train():
    config = load_config(overrides={"rollout": {"temperature": 0.0}})
    with pytest.raises(ConfigError, match=r"rollout\.temperature: 0"):
        check_trainable(config)
    check_trainable(load_config())


def test_every_knob_of_every_command_lives_in_the_tree():
    # The harness budgets, the loss aggregation, evaluation and SFT are sections of the
    # same tree as training, so one file (or --set) configures every command.
    config = load_config(
        overrides=parse_overrides(
            [
                "harness.max_turns=3",
                "harness.system_prompt=Be brief.",
                "trainer.aggregation=token_mean",
                "rollout.verify_timeout_s=5",
                "eval.max_concurrent=4",
                "sft.lr=3e-4",
                "sft.betas=[0.9, 0.99]",
            ]
        )
    )
    assert (config.harness.max_turns, config.harness.system_prompt) == (3, "Be brief.")
    assert config.trainer.aggregation == "token_mean"
    assert (config.rollout.verify_timeout_s, config.eval.max_concurrent) == (5.0, 4)
    assert (config.sft.lr, config.sft.betas) == (3e-4, (0.9, 0.99))
    with pytest.raises(ConfigError, match=r"sft\.hidden"):
        load_config(overrides={"sft": {"hidden": 100}})


def test_with_overrides_validates_like_a_file():
    config = load_config()
    assert with_overrides(config, {"trainer": {"steps": 3}}).trainer.steps == 3
    assert config.trainer.steps != 3  # the original is untouched
    with pytest.raises(ConfigError, match=r"rollout\.group_size"):
        with_overrides(config, {"rollout": {"group_size": 1}})


def test_the_optimiser_defaults_are_one_update_and_dynamic_sampling():
    trainer = load_config().trainer
    assert (trainer.minibatches, trainer.dynamic_sampling, trainer.max_skip_batches) == (2, True, 2)
    config = load_config(overrides=parse_overrides(["trainer.minibatches=4",
                                                    "trainer.dynamic_sampling=false"]))  # fmt: skip
    assert (config.trainer.minibatches, config.trainer.dynamic_sampling) == (4, False)


def test_the_demo_configuration_names_shipped_parts():
    """`make demo`'s file parses, starts from a shipped model with its tokenizer and trains
    on a bundled suite's train split, with guided groups."""
    config = load_config(Path("demo"))  # the shipped preset, by name, from any directory
    assert config == load_config(PRESETS / "demo.toml")
    model = resolve_checkpoint(config.model.path)
    assert model != Path(config.model.path)  # a shipped model, not a folder of the caller's
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in model.iterdir()
    }
    assert load_tasks(suite=config.tasks.suite, split=config.tasks.split)
    assert config.rollout.guide_failed_groups and config.rollout.guide_recovery
    # 163 solved by base-slip left out, and the evaluation that says so is of its weights
    assert len(training_tasks(config.tasks, model)) == 277


def test_a_config_files_paths_are_relative_to_the_file(tmp_path, monkeypatch):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "run.toml"
    path.write_text('[tasks]\nskip_solved = "solved.json"\ntasks_dir = "../tasks"\n')
    monkeypatch.chdir(tmp_path / "conf")
    config = load_config(path)
    monkeypatch.chdir(tmp_path)
    assert config.tasks.skip_solved == str(tmp_path / "conf" / "solved.json")
    assert config.tasks.tasks_dir == str(tmp_path / "tasks")
    assert load_config(path).tasks.tasks_dir == str(tmp_path / "tasks")  # from anywhere
    given = load_config(path, {"tasks": {"skip_solved": "mine.json"}}).tasks.skip_solved
    assert given == "mine.json"  # a command-line override: relative to where it was typed


def test_an_empty_skip_solved_turns_the_filter_off():
    demo = PRESETS / "demo.toml"
    assert load_config(demo).tasks.skip_solved is not None
    off = load_config(demo, parse_overrides(["tasks.skip_solved="]))
    assert off.tasks.skip_solved is None


@pytest.mark.parametrize(
    ("knob", "value", "module", "extra"),
    [("engine", "vllm", "vllm", "vllm"), ("harness", "mini-swe-agent", "minisweagent", "mswe")],
)
def test_an_engine_or_harness_without_its_package_is_refused_naming_the_extra(
    knob, value, module, extra, monkeypatch
):
    config = load_config(overrides={"rollout": {knob: value}})
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == module else real(name, *a)
    )
    with pytest.raises(ConfigError, match=rf"rollout\.{knob} = {value}.*'fleetrl\[{extra}\]'"):
        check_trainable(config)
    check_trainable(load_config())  # the defaults need no extra
