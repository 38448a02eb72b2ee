"""`fleetrl bench horizon`'s pure parts: compaction error (a fact found as a whole token),
tokens per solved episode, tokens per summary, each arm's harness, and the document's
shape with its paired gains in points. The CLI end to end is in tests/integration/bench."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetrl.bench.horizon import (
    ARMS,
    NO_FACTS,
    HorizonBenchError,
    arm_config,
    arm_report,
    check_tasks,
    document,
    mean_compaction_error,
    summary_tokens,
    tokens_per_solved,
)
from fleetrl.config_files import load_config
from fleetrl.observe.horizon import compaction_error, kept_facts
from fleetrl.rollout.stats import summarise
from fleetrl.types import Segment, Trajectory

FACTS = ["bbda = 76", "SRH", "qzo.py"]
ARM_KEYS = {"pass_at_1", "ci_low", "ci_high", "compaction_error", "tokens_per_solved",
            "summary_tokens", "episodes", "tasks", "temperature", "finish_reasons",
            "summaries"}  # fmt: skip


def episode(task: str, reward: float, windows: list[int], summaries: list[str] = ()) -> Trajectory:
    segments = [Segment(list(range(n)), [0] * n, [0.0] * n, [-1] * n) for n in windows]
    return Trajectory(
        task_id=task,
        segments=segments,
        reward=reward,
        finish_reason="finish" if reward else "context_full",
        turns=len(windows),
        tool_calls=0,
        tool_errors=0,
        duration_s=0.0,
        summaries=list(summaries),
    )


class Words:
    """A tokenizer whose tokens are words."""

    def encode(self, text: str) -> list[int]:
        return list(range(len(text.split())))


def test_a_fact_counts_only_as_a_whole_token():
    assert kept_facts(FACTS, ["bbda = 76 in qzo.py, see SRH."]) == FACTS
    assert kept_facts(["qzo.py"], ["read src/qzo.py next"]) == ["qzo.py"]
    for text in ["aqzo.py", "x.qzo.py", "qzo.pyc", "qzo_py"]:
        assert kept_facts(["qzo.py"], [text]) == [], text
    assert kept_facts(["bbda = 76"], ["bbda = 765", "xbbda = 76", "bbda=76"]) == []
    assert kept_facts(["SRH"], ["SRHX", "the SRH_2 constant", "srh"]) == []
    assert kept_facts(["f(a)"], ["call f(a)"]) == ["f(a)"]  # regex characters are literal


def test_compaction_error_is_the_share_of_facts_no_summary_keeps():
    assert compaction_error(FACTS, ["bbda = 76, SRH, qzo.py"]) == 0.0
    assert compaction_error(FACTS, ["bbda = 76"]) == pytest.approx(2 / 3)
    assert compaction_error(FACTS, ["bbda = 76", "then qzo.py"]) == pytest.approx(1 / 3)
    assert compaction_error(FACTS, ["nothing useful"]) == 1.0
    assert compaction_error(FACTS, []) == 1.0
    assert compaction_error([], ["anything"]) == 0.0
    # a fact split across two summaries is not kept
    assert compaction_error(["bbda = 76"], ["bbda =", "76"]) == 1.0


def test_mean_compaction_error_counts_only_episodes_that_summarised():
    facts = {"a": FACTS, "b": ["SRH"], "c": []}
    trajectories = [
        episode("a", 1.0, [10, 10], ["bbda = 76 and SRH"]),  # 1/3 lost
        episode("b", 0.0, [10, 10], ["no facts here"]),  # 1 lost
        episode("a", 0.0, [10]),  # never summarised: not counted
        episode("c", 1.0, [10, 10], ["a task without facts: not counted"]),
    ]
    assert mean_compaction_error(trajectories, facts) == pytest.approx((1 / 3 + 1) / 2)
    assert mean_compaction_error(trajectories[2:], facts) is None
    assert mean_compaction_error([], facts) is None


def test_tokens_per_solved_counts_every_window_of_every_episode():
    trajectories = [
        episode("a", 1.0, [100, 50]),
        episode("a", 0.0, [200]),
        episode("b", 1.0, [30, 20, 10]),
    ]
    assert tokens_per_solved(trajectories) == (150 + 200 + 60) / 2
    assert tokens_per_solved(trajectories[1:2]) is None
    assert tokens_per_solved([]) is None


def test_summary_tokens_is_the_mean_length_of_a_summary():
    trajectories = [episode("a", 1.0, [5, 5], ["one two three"]), episode("b", 0.0, [5])]
    trajectories.append(episode("c", 0.0, [5, 5, 5], ["one", "one two"]))
    assert summary_tokens(trajectories, Words()) == pytest.approx((3 + 1 + 2) / 3)
    assert summary_tokens(trajectories[1:2], Words()) is None


def test_each_arm_changes_only_compaction():
    config = load_config(Path("long"))
    harnesses = {arm: arm_config(config, arm).harness for arm in ARMS}
    assert harnesses["none"].summary_limit("long") is None and not harnesses["none"].truncate
    assert harnesses["truncate"].summary_limit("long") is None and harnesses["truncate"].truncate
    for arm in ("prompted", "trained"):
        assert harnesses[arm].summary_limit("long") == config.harness.summary_limit("long")
        assert harnesses[arm].summary_limit("long") is not None and not harnesses[arm].truncate
    budgets = {"max_context", "max_tokens", "max_turns", "max_reply_tokens", "max_segments"}
    for harness in harnesses.values():
        assert harness.model_dump(include=budgets) == config.harness.model_dump(include=budgets)
    with pytest.raises(ValueError, match="unknown arm"):
        arm_config(config, "sometimes")


def test_tasks_without_facts_or_summaries_are_refused():
    config = load_config(Path("long"), {"eval": {"max_tasks": 2}})
    assert all(task.facts for task in check_tasks(config, "heldout", 1.0))
    micro = load_config(Path("long"), {"tasks": {"suite": "micro"}, "eval": {"max_tasks": 2}})
    with pytest.raises(HorizonBenchError, match=r"tasks\.suite=long") as err:
        check_tasks(micro, "heldout", 1.0)
    assert str(err.value) == NO_FACTS
    off = load_config(Path("long"), {"harness": {"summarise_at": 0}, "eval": {"max_tasks": 2}})
    with pytest.raises(HorizonBenchError, match="summarise_at"):
        check_tasks(off, "heldout", 1.0)
    with pytest.raises(HorizonBenchError, match=r"eval\.val_split"):
        check_tasks(config, "val", None)  # choosing the temperature on the reported split


def test_the_document_has_four_arms_and_gains_in_points():
    tasks = ["t1", "t2", "t3", "t4"]
    facts = {task: FACTS for task in tasks}
    passed = {"none": [], "truncate": ["t1"], "prompted": ["t1", "t2"], "trained": tasks[:3]}
    arms = {}
    for arm, solved in passed.items():
        summaries = ["bbda = 76, SRH"] if arm in ("prompted", "trained") else []
        runs = [episode(t, float(t in solved), [40, 30], summaries) for t in tasks]
        result = summarise(runs, len(tasks), 1.0, temperature=0.5)
        arms[arm] = arm_report(arm, result, runs, facts, Words())
    doc = json.loads(json.dumps(document("heldout", Path("b"), Path("t"), arms)))
    assert list(doc) == ["split", "models", *ARMS, "gains"]
    assert (doc["split"], doc["models"]) == ("heldout", {"base": "b", "trained": "t"})
    for arm, report in ((arm, doc[arm]) for arm in ARMS):
        assert set(report) >= ARM_KEYS, arm
        assert report["episodes"] == 4 and report["tasks"] == 4 and report["temperature"] == 0.5
    none, trained = doc["none"], doc["trained"]
    assert none["summaries"] == 0 and none["compaction_error"] is None
    assert none["tokens_per_solved"] is None and none["pass_at_1"] == 0.0
    assert trained["compaction_error"] == pytest.approx(1 / 3)
    assert trained["tokens_per_solved"] == pytest.approx(4 * 70 / 3)
    assert trained["summary_tokens"] == 4.0 and trained["summaries"] == 4
    assert (trained["model"], doc["prompted"]["model"]) == ("trained", "base")
    assert set(doc["gains"]) == {"trained_vs_truncate", "trained_vs_prompted"}
    over_truncate = doc["gains"]["trained_vs_truncate"]
    assert over_truncate["points"] == pytest.approx(50.0)
    assert over_truncate["ci_low"] <= 50.0 <= over_truncate["ci_high"]
    assert doc["gains"]["trained_vs_prompted"]["points"] == pytest.approx(25.0)
