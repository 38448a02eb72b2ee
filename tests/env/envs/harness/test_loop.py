"""The agent loop in a real sandbox: scripted replies for exact checks, a real engine for
the token invariants, and an OpenAI-compatible endpoint."""

import asyncio
import json
import socket
import threading
import time

import pytest
import torch
import uvicorn
from fastapi import FastAPI

from fleetrl.config import HarnessSection
from fleetrl.envs.harness.loop import (
    run_episode,
    run_episode_openai,
)
from fleetrl.envs.sandbox import open_sandbox
from fleetrl.inference.engine import Engine
from fleetrl.model.chat import Message, ToolCall, encode_chat, format_reply
from fleetrl.model.checkpoint import init_model
from fleetrl.model.config import ModelConfig
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.types import Completion, SamplingParams, Task

torch.set_num_threads(1)
TOKENIZER = bundled_tokenizer()
# A general-purpose harness (the tools listed in the prompt, roomy budgets), not the micro preset.
HARNESS = HarnessSection(
    system_prompt="You are a coding agent. Fix the problem, then call finish.",
    describe_tools=True,
    max_turns=10,
    max_tokens=4096,
    max_reply_tokens=1024,
    max_context=8192,
    wall_s=300.0,
    max_output_chars=4000,
    run_timeout_s=30.0,
)
SAMPLING = SamplingParams()
BUGGY = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"


@pytest.fixture
def repo(tmp_path):
    (tmp_path / "calc.py").write_text(BUGGY)
    (tmp_path / "test_calc.py").write_text(TEST)
    return tmp_path


def make_task(repo) -> Task:
    return Task(
        instance_id="calc-1",
        repo=str(repo),
        base_commit="0" * 40,
        problem_statement="add(2, 3) should return 5 but returns -1",
        patch="",
        test_patch="",
        FAIL_TO_PASS=["test_calc.py::test_add"],
        PASS_TO_PASS=[],
    )


class ScriptedPolicy:
    """The model edge, faked: replies are given as assistant messages or raw text."""

    def __init__(self, replies: list[Message | str]) -> None:
        self.replies = list(replies)
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids, params: SamplingParams) -> Completion:
        self.prompts.append(list(prompt_ids))
        reply = self.replies.pop(0)
        text = format_reply(reply) if isinstance(reply, Message) else reply
        ids = TOKENIZER.encode(text + "<|im_end|>")[: params.max_tokens]
        stopped = ids[-1] == TOKENIZER.eos_id
        return Completion(
            prompt_ids=list(prompt_ids),
            token_ids=ids,
            logprobs=[-0.5] * len(ids),
            versions=[3] * len(ids),
            finish_reason="stop" if stopped else "length",
        )


def call(name: str, **arguments) -> Message:
    return Message("assistant", "", [ToolCall(name, arguments)])


def run(coro):
    return asyncio.run(coro)


def test_scripted_fix_episode_records_exact_tokens(repo):
    replies = [
        call("read_file", path="calc.py"),
        call("edit_file", path="/workspace/calc.py", old="a - b", new="a + b"),
        call("run", command="python -m pytest -q -p no:cacheprovider"),
        call("finish"),
    ]
    policy = ScriptedPolicy(replies)
    with open_sandbox(repo) as sandbox:
        if sandbox.workdir != "/workspace":
            replies[1].tool_calls[0].arguments["path"] = sandbox.workdir + "/calc.py"
        episode = run(run_episode(policy, TOKENIZER, sandbox, make_task(repo), HARNESS, SAMPLING))
        assert "+    return a + b" in sandbox.diff()
    traj = episode.trajectory
    assert (traj.finish_reason, traj.turns, traj.tool_calls, traj.tool_errors) == (
        "finish",
        4,
        4,
        0,
    )
    assert [r.name for r in episode.tool_log] == ["read_file", "edit_file", "run", "finish"]
    assert episode.tool_log[0].output == "1: def add(a, b):\n2:     return a - b"
    assert "1 passed" in episode.tool_log[2].output
    (segment,) = traj.segments
    # Token in, token out: the sampled ids sit in the sequence exactly as generated...
    sampled = [t for t, m in zip(segment.token_ids, segment.loss_mask, strict=True) if m]
    expected = [t for r in replies for t in TOKENIZER.encode(format_reply(r) + "<|im_end|>")]
    assert sampled == expected
    assert set(segment.versions[i] for i, m in enumerate(segment.loss_mask) if m) == {3}
    # ...and the whole sequence is what the chat template renders for this conversation.
    results = [o.output for o in episode.tool_log[:3]]
    conversation = [
        Message("system", HARNESS.system_prompt),
        Message("user", make_task(repo).problem_statement),
    ]
    for reply, result in zip(replies[:3], results, strict=True):
        conversation += [reply, Message("tool", result)]
    from fleetrl.envs.harness.tools import TOOL_SPECS

    rendered = encode_chat(
        TOKENIZER, [*conversation, replies[3]], TOOL_SPECS, add_generation_prompt=False
    )
    assert segment.token_ids == rendered[: len(segment.token_ids)]
    assert len(rendered) - len(segment.token_ids) == len(TOKENIZER.encode("\n"))
    # Every prompt the policy saw was a prefix of the final sequence.
    for prompt in policy.prompts:
        assert segment.token_ids[: len(prompt)] == prompt


def test_model_mistakes_are_shown_counted_and_survived(repo):
    replies = [
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "calc.py"\n</tool_call>',
        call("delete_everything"),
        call("edit_file", path="calc.py", old="not there", new="x"),
        call("read_file", path="../../etc/passwd"),
        call("read_file", path="calc.py", start="1"),
        call("finish"),
    ]
    policy = ScriptedPolicy(replies)
    with open_sandbox(repo) as sandbox:
        episode = run(run_episode(policy, TOKENIZER, sandbox, make_task(repo), HARNESS, SAMPLING))
        assert sandbox.diff() == ""
    traj = episode.trajectory
    assert traj.finish_reason == "finish"
    assert traj.tool_errors == 5
    last_prompt = TOKENIZER.decode(policy.prompts[-1])
    for shown in ("invalid JSON", "unknown tool 'delete_everything'", "not found in calc.py",
                  "outside the workspace", "'start' must be an integer"):  # fmt: skip
        assert shown in last_prompt


def test_a_refused_edit_shows_the_line_it_most_likely_meant(repo):
    """A mis-copied `old` is refused with the file's closest lines, numbered like read_file,
    so the policy can copy them; `old` like nothing in the file gets the bare refusal."""
    replies = [
        call("edit_file", path="calc.py", old="return a - c", new="return a + b"),
        call("edit_file", path="calc.py", old="import numpy", new="x"),
        call("finish"),
    ]
    with open_sandbox(repo) as sandbox:
        episode = run(
            run_episode(
                ScriptedPolicy(replies), TOKENIZER, sandbox, make_task(repo), HARNESS, SAMPLING
            )
        )
    mis_copied, unlike = episode.tool_log[0], episode.tool_log[1]
    assert mis_copied.error and mis_copied.output == (
        "error: edit_file: 'old' text not found in calc.py; the closest lines in the file:\n"
        "2:     return a - b"
    )
    assert unlike.error and unlike.output == "error: edit_file: 'old' text not found in calc.py"


def test_budgets_end_episodes(repo):
    with open_sandbox(repo) as sandbox:
        no_call = run(
            run_episode(
                ScriptedPolicy(["I give up."]),
                TOKENIZER,
                sandbox,
                make_task(repo),
                HARNESS,
                SAMPLING,
            )
        )
        assert no_call.trajectory.finish_reason == "no_tool_call"
        turns = HARNESS.model_copy(update={"max_turns": 2})
        looping = ScriptedPolicy([call("list_dir")] * 3)
        capped = run(run_episode(looping, TOKENIZER, sandbox, make_task(repo), turns, SAMPLING))
        assert (capped.trajectory.finish_reason, capped.trajectory.turns) == ("max_turns", 2)
        # The results of the last turn were never read by the policy: they are not kept.
        segment = capped.trajectory.segments[0]
        assert segment.loss_mask[-1] == 1
        tokens = HARNESS.model_copy(update={"max_tokens": 5})
        cut = run(
            run_episode(
                ScriptedPolicy([call("list_dir")]),
                TOKENIZER,
                sandbox,
                make_task(repo),
                tokens,
                SAMPLING,
            )
        )
        assert cut.trajectory.finish_reason == "max_tokens"
        assert sum(cut.trajectory.segments[0].loss_mask) == 5


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
def test_real_engine_episode_keeps_engine_tokens_and_routing(repo, moe):
    config = ModelConfig(
        vocab_size=TOKENIZER.vocab_size,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=4 if moe else 0,
        moe_intermediate_size=32,
    )
    model = init_model(config, seed=0)
    harness = HARNESS.model_copy(update={"max_turns": 3, "max_reply_tokens": 24})

    async def episode():
        engine = Engine(model, max_model_len=2048)
        try:
            with open_sandbox(repo) as sandbox:
                return await run_episode(
                    engine, TOKENIZER, sandbox, make_task(repo), harness, SamplingParams(seed=1)
                )
        finally:
            await engine.close()

    traj = run(episode()).trajectory
    (segment,) = traj.segments
    n = len(segment.token_ids)
    assert len(segment.loss_mask) == len(segment.logprobs) == len(segment.versions) == n
    assert sum(segment.loss_mask) == 24  # a random model never closes its reply: cut off
    assert traj.finish_reason == "max_tokens"
    with torch.no_grad():
        logits = model(torch.tensor([segment.token_ids])).logits[0]
    logprobs = torch.log_softmax(logits, -1)
    for i, m in enumerate(segment.loss_mask):
        if m:
            forced = logprobs[i - 1, segment.token_ids[i]].item()
            assert abs(forced - segment.logprobs[i]) < 1e-5
    if moe:
        assert len(segment.routed_experts) == n
        assert all(len(r) == 2 and len(r[0]) == 2 for r in segment.routed_experts)
    else:
        assert segment.routed_experts is None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scripted_openai_server(replies: list[dict]) -> tuple[uvicorn.Server, int, list]:
    """An OpenAI-compatible endpoint whose 'model' plays back replies (the faked edge)."""
    app = FastAPI()
    seen: list = []

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        seen.append(body)
        return {"choices": [{"index": 0, "message": replies.pop(0), "finish_reason": "stop"}]}

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.01)
    return server, port, seen


def openai_call(name: str, arguments: str) -> dict:
    return {
        "id": f"c-{name}",
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def test_openai_endpoint_episode(repo):
    edit = json.dumps({"path": "calc.py", "old": "a - b", "new": "a + b"})
    replies = [
        {"role": "assistant", "content": None, "tool_calls": [openai_call("read_file", "{bad")]},
        {"role": "assistant", "content": None, "tool_calls": [openai_call("edit_file", edit)]},
        {"role": "assistant", "content": "done", "tool_calls": [openai_call("finish", "{}")]},
    ]
    server, port, seen = scripted_openai_server(replies)
    try:
        with open_sandbox(repo) as sandbox:
            episode = run(
                run_episode_openai(
                    f"http://127.0.0.1:{port}/v1", "m", sandbox, make_task(repo), HARNESS
                )
            )
            assert "+    return a + b" in sandbox.diff()
    finally:
        server.should_exit = True
    traj = episode.trajectory
    assert (traj.finish_reason, traj.turns, traj.tool_errors) == ("finish", 3, 1)
    assert traj.segments == []
    assert [t["function"]["name"] for t in seen[0]["tools"]][:2] == ["read_file", "write_file"]
    tool_messages = [m for m in seen[1]["messages"] if m["role"] == "tool"]
    assert "not valid JSON" in tool_messages[0]["content"]
    assert tool_messages[0]["tool_call_id"] == "c-read_file"
