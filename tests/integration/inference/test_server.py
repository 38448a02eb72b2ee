"""The inference server end to end: real uvicorn servers on free ports, real HTTP, the official
openai client, tiny random dense and MoE checkpoints (plus one `fleetrl serve` subprocess)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import openai
import pytest
import safetensors.torch
import torch
import uvicorn
from typer.testing import CliRunner

from fleetrl.cli import app
from fleetrl.inference import engine as engine_module
from fleetrl.inference import server
from fleetrl.inference.engine import Engine
from fleetrl.inference.server import create_app
from fleetrl.model.chat import Message, ToolCall, encode_chat
from fleetrl.model.checkpoint import init_model, load_pretrained, save_pretrained
from fleetrl.model.config import ModelConfig
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.types import Completion, InvalidRequest

ADMIN_TOKEN = "s3cret"
MAX_MODEL_LEN = 1024
REQUEST_LIMIT = 64 * 1024
UPDATE_LIMIT = 1 << 20
TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
MOE = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}},
            "required": ["path"],
        },
    },
}


class Served(NamedTuple):
    url: str
    engine: Engine


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return bundled_tokenizer()


def tiny_config(tokenizer: Tokenizer, **extra: int) -> ModelConfig:
    return ModelConfig(
        vocab_size=tokenizer.vocab_size, eos_token_id=tokenizer.eos_id, **TINY, **extra
    )


@pytest.fixture(scope="module")
def dense_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer) -> Path:
    path = tmp_path_factory.mktemp("dense")
    save_pretrained(init_model(tiny_config(tokenizer)), path)
    tokenizer.save(path)
    return path


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer: Tokenizer) -> Path:
    path = tmp_path_factory.mktemp("moe")
    save_pretrained(init_model(tiny_config(tokenizer, **MOE)), path)
    tokenizer.save(path)
    return path


@contextlib.contextmanager
def running(app: Any) -> Iterator[str]:
    """Serve `app` with uvicorn in a background thread on a free port; yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@contextlib.contextmanager
def serving(path: Path, tokenizer: Tokenizer, **app_options: Any) -> Iterator[Served]:
    engine = Engine(load_pretrained(path), max_batch_size=8, max_model_len=MAX_MODEL_LEN)
    app = create_app(engine, tokenizer, "tiny", **app_options)
    with running(app) as url:
        yield Served(url, engine)


@pytest.fixture(scope="module")
def dense(dense_dir: Path, tokenizer: Tokenizer) -> Iterator[Served]:
    """No admin token, a 64 KiB request limit."""
    with serving(dense_dir, tokenizer, admin_token=None, max_request_bytes=REQUEST_LIMIT) as s:
        yield s


@pytest.fixture(scope="module")
def moe(moe_dir: Path, tokenizer: Tokenizer) -> Iterator[Served]:
    with serving(moe_dir, tokenizer, admin_token=None) as served:
        yield served


@pytest.fixture
def updatable(dense_dir: Path, tokenizer: Tokenizer) -> Iterator[Served]:
    """A fresh server per test (weights at version 0) that accepts ADMIN_TOKEN's updates."""
    with serving(dense_dir, tokenizer, admin_token=ADMIN_TOKEN, max_update_bytes=UPDATE_LIMIT) as s:
        yield s


def oai(served: Served) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0)


def generate(served: Served, prompt_ids: list[int], **sampling: Any) -> dict[str, Any]:
    body = {"prompt_ids": prompt_ids, "sampling": sampling}
    response = httpx.post(f"{served.url}/generate", json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def assert_same_generation(a: dict[str, Any], b: dict[str, Any]) -> None:
    """Same tokens from the same weights; logprobs may differ in the last float bits (the
    engine's prefix cache reuses keys/values computed in another batch)."""
    assert (a["token_ids"], a["versions"], a["finish_reason"]) == (
        b["token_ids"],
        b["versions"],
        b["finish_reason"],
    )
    assert a["logprobs"] == pytest.approx(b["logprobs"], abs=1e-5)


def health(served: Served) -> dict[str, Any]:
    return httpx.get(f"{served.url}/health").json()


def new_weights(tokenizer: Tokenizer, seed: int) -> bytes:
    """Every weight of another random model (the tied lm_head left out), as safetensors."""
    state = init_model(tiny_config(tokenizer), seed=seed).state_dict()
    del state["lm_head.weight"]
    return safetensors.torch.save({k: v.contiguous() for k, v in state.items()})


def post_update(served: Served, body: bytes, version: int, token: str | None = ADMIN_TOKEN):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"{served.url}/update_weights?version={version}"
    return httpx.post(url, content=body, headers=headers, timeout=60)


def assert_error(response: httpx.Response, status: int | None = None) -> dict[str, Any]:
    assert 400 <= response.status_code < 500, response.text
    assert status is None or response.status_code == status, response.text
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] and error["code"] == response.status_code
    return error


# -- OpenAI API --------------------------------------------------------------------------


def test_health_and_models(dense: Served) -> None:
    status = health(dense)
    assert status["status"] == "ok" and status["model"] == "tiny" and status["version"] == 0
    assert {"running", "waiting", "generated_tokens"} <= status.keys()
    assert [model.id for model in oai(dense).models.list()] == ["tiny"]


def test_chat_completion(dense: Served, tokenizer: Tokenizer) -> None:
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Say hi."},
    ]

    def ask(seed: int) -> Any:
        return oai(dense).chat.completions.create(
            model="tiny", messages=messages, max_tokens=12, seed=seed, logprobs=True, top_logprobs=3
        )

    reply = ask(seed=7)
    [choice] = reply.choices
    token_ids = choice.model_extra["token_ids"]
    assert 1 <= len(token_ids) <= 12 and choice.finish_reason in ("stop", "length")
    assert choice.message.content == tokenizer.decode(token_ids).removesuffix("<|im_end|>")
    prompt = encode_chat(
        tokenizer, [Message("system", "You are terse."), Message("user", "Say hi.")]
    )
    assert reply.model_extra["prompt_token_ids"] == prompt
    assert reply.usage.prompt_tokens == len(prompt)
    assert reply.usage.completion_tokens == len(token_ids)
    assert reply.usage.total_tokens == len(prompt) + len(token_ids)
    assert choice.model_extra["versions"] == [0] * len(token_ids)
    entries = choice.logprobs.content
    assert len(entries) == len(token_ids)
    assert all(e.logprob <= 0 and len(e.top_logprobs) == 3 for e in entries)
    assert all(alt.logprob <= 0 for e in entries for alt in e.top_logprobs)
    raw = bytes(b for e in entries for b in e.bytes)  # exact bytes, even across split characters
    assert raw.decode("utf-8", errors="replace") == tokenizer.decode(token_ids)

    assert ask(seed=7).choices[0].model_extra["token_ids"] == token_ids
    assert ask(seed=8).choices[0].model_extra["token_ids"] != token_ids


def test_chat_n_choices(dense: Served) -> None:
    reply = oai(dense).chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=6, n=3, seed=1
    )
    ids = [choice.model_extra["token_ids"] for choice in reply.choices]
    assert [choice.index for choice in reply.choices] == [0, 1, 2]
    assert len({tuple(i) for i in ids}) == 3
    assert reply.usage.completion_tokens == sum(len(i) for i in ids)


def test_chat_renders_tools_and_tool_history(dense: Served, tokenizer: Tokenizer) -> None:
    arguments = json.dumps({"path": "a.py"})
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "Fix a.py"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "x = 1"},
    ]
    reply = oai(dense).chat.completions.create(
        model="tiny", messages=messages, tools=[READ_FILE], max_tokens=4
    )
    expected = encode_chat(
        tokenizer,
        [
            Message("user", "Fix a.py"),
            Message("assistant", "", [ToolCall("read_file", {"path": "a.py"})]),
            Message("tool", "x = 1"),
        ],
        tools=[READ_FILE],
    )
    assert reply.usage.prompt_tokens == len(expected)
    assert reply.model_extra["prompt_token_ids"] == expected


def test_completions_with_logprobs(dense: Served, tokenizer: Tokenizer) -> None:
    client = oai(dense)
    out = client.completions.create(
        model="tiny", prompt="def main():", max_tokens=8, logprobs=2, seed=1
    )
    [choice] = out.choices
    n = len(choice.model_extra["token_ids"])
    assert 1 <= n <= 8 and out.usage.completion_tokens == n
    assert out.usage.prompt_tokens == len(tokenizer.encode("def main():"))
    lp = choice.logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == n
    assert len(lp.text_offset) == n and lp.text_offset == sorted(lp.text_offset)
    assert all(x <= 0 for x in lp.token_logprobs)
    assert all(1 <= len(top) <= 2 and max(top.values()) <= 0 for top in lp.top_logprobs)

    again = client.completions.create(
        model="tiny", prompt=tokenizer.encode("def main():"), max_tokens=8, logprobs=2, seed=1
    )
    assert again.choices[0].text == choice.text
    # Served from the prefix cache, through other kernels: equal within the logprob floor.
    assert again.choices[0].logprobs.token_logprobs == pytest.approx(lp.token_logprobs, abs=1e-5)


def test_completion_cut_at_stop_string(dense: Served, tokenizer: Tokenizer) -> None:
    client = oai(dense)
    full = client.completions.create(model="tiny", prompt="import os", max_tokens=40, seed=3)
    text, ids = full.choices[0].text, full.choices[0].model_extra["token_ids"]
    assert len(text) > 20, text
    stop = text[12:16]
    cut = client.completions.create(
        model="tiny", prompt="import os", max_tokens=40, seed=3, stop=[stop, "never seen"]
    )
    [choice] = cut.choices
    kept = choice.model_extra["token_ids"]
    assert choice.text == text[: text.index(stop)] and choice.finish_reason == "stop"
    assert kept == ids[: len(kept)]  # every token up to the one that completed the stop string
    assert stop in tokenizer.decode(kept) and stop not in tokenizer.decode(kept[:-1])


# -- /generate ---------------------------------------------------------------------------


def test_generate_logprobs_match_teacher_forcing(dense: Served, dense_dir: Path) -> None:
    prompt = [5, 17, 300, 42, 9]
    out = generate(dense, prompt, max_tokens=24, seed=0, top_logprobs=3)
    tokens = out["token_ids"]
    assert len(tokens) == len(out["logprobs"]) == len(out["versions"]) == 24
    assert out["finish_reason"] == "length" and out["versions"] == [0] * 24
    assert out["routed_experts"] is None and out["prompt_routed_experts"] is None
    assert [len(top) for top in out["top_logprobs"]] == [3] * 24
    model = load_pretrained(dense_dir)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1 : -1]
    expected = torch.log_softmax(logits.float(), dim=-1)[torch.arange(24), tokens]
    torch.testing.assert_close(torch.tensor(out["logprobs"]), expected, atol=1e-5, rtol=0)


def test_generate_moe_routed_experts(moe: Served, moe_dir: Path) -> None:
    prompt = [3, 14, 15, 92, 65, 35, 89]
    out = generate(moe, prompt, max_tokens=6, seed=0)
    routed, prompt_routed = out["routed_experts"], out["prompt_routed_experts"]
    n_moe_layers, k = TINY["num_hidden_layers"], MOE["num_experts_per_tok"]
    assert torch.tensor(routed).shape == (6, n_moe_layers, k)
    assert torch.tensor(prompt_routed).shape == (len(prompt), n_moe_layers, k)
    model = load_pretrained(moe_dir)
    with torch.no_grad():
        ids = torch.tensor([prompt + out["token_ids"]])
        experts = model(ids, return_routed_experts=True).routed_experts[0]
    assert experts.sort(dim=-1).values.tolist() == (
        torch.tensor(prompt_routed + routed).sort(dim=-1).values.tolist()
    )


# -- /update_weights ---------------------------------------------------------------------


def test_update_weights_needs_an_admin_token_configured(
    dense: Served, tokenizer: Tokenizer
) -> None:
    error = assert_error(post_update(dense, new_weights(tokenizer, seed=1), version=1), 403)
    assert "--admin-token" in error["message"]
    assert health(dense)["version"] == 0


def test_update_weights_refuses_bad_tokens(updatable: Served, tokenizer: Tokenizer) -> None:
    before = generate(updatable, [1, 2, 3], max_tokens=8, seed=5)
    body = new_weights(tokenizer, seed=1)
    for token in (None, "wrong", ADMIN_TOKEN + "x"):
        assert_error(post_update(updatable, body, version=1, token=token), 401)
    basic = httpx.post(
        f"{updatable.url}/update_weights?version=1",
        content=body,
        headers={"Authorization": f"Basic {ADMIN_TOKEN}"},
    )
    assert_error(basic, 401)
    assert health(updatable)["version"] == 0
    assert_same_generation(generate(updatable, [1, 2, 3], max_tokens=8, seed=5), before)


def test_update_weights_answers_a_caller_without_the_token_before_anything_else(
    dense: Served, updatable: Served
) -> None:
    # No version query, a bad one, a body over the limit: nothing about the endpoint shows.
    for query in ("", "?version=x", "?version=1"):
        for body in (b"", b"\0" * (UPDATE_LIMIT + 1)):
            for token in (None, "wrong"):
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                url = f"{updatable.url}/update_weights{query}"
                response = httpx.post(url, content=body, headers=headers, timeout=60)
                assert_error(response, 401)
            response = httpx.post(f"{dense.url}/update_weights{query}", content=body, timeout=60)
            assert_error(response, 403)  # a server without an admin token
    error = assert_error(post_update_query(updatable, ""), 400)  # with the token: the query
    assert "version" in error["message"]
    assert_error(post_update_query(updatable, "?version=x"), 400)
    assert health(updatable)["version"] == 0


def post_update_query(served: Served, query: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    return httpx.post(f"{served.url}/update_weights{query}", content=b"", headers=headers)


def test_update_weights_applies_and_validates(updatable: Served, tokenizer: Tokenizer) -> None:
    before = generate(updatable, [1, 2, 3], max_tokens=8, seed=5)
    response = post_update(updatable, new_weights(tokenizer, seed=1), version=1)
    assert response.status_code == 200, response.text
    result = response.json()
    assert result["version"] == 1 and result["pause_s"] >= 0
    assert result["tensors"] == len(init_model(tiny_config(tokenizer)).state_dict()) - 1
    assert health(updatable)["version"] == 1
    after = generate(updatable, [1, 2, 3], max_tokens=8, seed=5)
    assert after["versions"] == [1] * 8 and after["token_ids"] != before["token_ids"]

    bad_bodies = [
        safetensors.torch.save({"model.no_such.weight": torch.zeros(2)}),
        safetensors.torch.save({"model.norm.weight": torch.zeros(3)}),  # wrong shape
        b"not a safetensors file",
        b"",
    ]
    for body in bad_bodies:
        assert_error(post_update(updatable, body, version=2), 400)
    assert_error(post_update(updatable, b"\0" * (UPDATE_LIMIT + 1), version=2), 413)
    assert health(updatable)["version"] == 1
    assert_same_generation(generate(updatable, [1, 2, 3], max_tokens=8, seed=5), after)


def test_update_weights_during_generation(updatable: Served, tokenizer: Tokenizer) -> None:
    body = new_weights(tokenizer, seed=2)
    result: dict[str, Any] = {}

    def long_request() -> None:
        result["out"] = generate(updatable, [1, 2, 3], max_tokens=900)

    thread = threading.Thread(target=long_request)
    thread.start()
    deadline = time.monotonic() + 30
    while health(updatable)["running"] == 0:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    assert post_update(updatable, body, version=7).status_code == 200
    thread.join(timeout=60)
    versions = result["out"]["versions"]
    assert len(versions) == 900 and versions == sorted(versions)
    assert versions[0] == 0 and versions[-1] == 7 and set(versions) == {0, 7}


# -- bad requests ------------------------------------------------------------------------

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]
BAD_REQUESTS = {
    "invalid json": (
        CHAT,
        {"content": b'{"messages": [', "headers": {"content-type": "application/json"}},
    ),
    "not an object": (CHAT, {"json": [1, 2]}),
    "missing messages": (CHAT, {"json": {"model": "tiny"}}),
    "no messages": (CHAT, {"json": {"messages": []}}),
    "unknown role": (CHAT, {"json": {"messages": [{"role": "wizard", "content": "hi"}]}}),
    "image part": (
        CHAT,
        {
            "json": {
                "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]
            }
        },
    ),
    "max_tokens -1": (CHAT, {"json": {"messages": HI, "max_tokens": -1}}),
    "n 100": (CHAT, {"json": {"messages": HI, "n": 100}}),
    "temperature as text": (CHAT, {"json": {"messages": HI, "temperature": "hot"}}),
    "stream": (CHAT, {"json": {"messages": HI, "stream": True}}),
    "tool arguments not json": (
        CHAT,
        {
            "json": {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"type": "function", "function": {"name": "f", "arguments": "{"}}
                        ],
                    }
                ]
            }
        },
    ),
    "chat too long": (CHAT, {"json": {"messages": [{"role": "user", "content": "1" * 3000}]}}),
    "prompt too long": ("/v1/completions", {"json": {"prompt": [5] * 2000}}),
    "prompt empty": ("/v1/completions", {"json": {"prompt": ""}}),
    "echo": ("/v1/completions", {"json": {"prompt": "a", "echo": True}}),
    "huge seed": ("/v1/completions", {"json": {"prompt": "a", "seed": 2**70}}),
    "empty stop": ("/v1/completions", {"json": {"prompt": "a", "stop": ""}}),
    "id out of vocab": ("/generate", {"json": {"prompt_ids": [1, 1_000_000]}}),
    "negative id": ("/generate", {"json": {"prompt_ids": [-1]}}),
    "ids as text": ("/generate", {"json": {"prompt_ids": "hello"}}),
    "bad sampling": ("/generate", {"json": {"prompt_ids": [1], "sampling": {"top_p": 0}}}),
    "oversized": (CHAT, {"json": {"messages": [{"role": "user", "content": "x" * REQUEST_LIMIT}]}}),
    "oversized chunked": (CHAT, {"content": iter([b"x" * 40_000] * 3)}),
    "unknown path": ("/v2/nothing", {"json": {}}),
}


@pytest.mark.parametrize("name", BAD_REQUESTS)
def test_bad_request_is_a_json_4xx_and_the_server_keeps_serving(dense: Served, name: str) -> None:
    path, request = BAD_REQUESTS[name]
    response = httpx.post(f"{dense.url}{path}", timeout=30, **request)
    error = assert_error(response)
    if name.startswith("oversized"):
        assert response.status_code == 413
    if name == "stream":
        assert "streaming is not supported" in error["message"]
    assert len(generate(dense, [1, 2], max_tokens=2)["token_ids"]) == 2


def test_engine_failure_is_a_json_500(dense: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Completion:
        raise RuntimeError("out of memory")

    monkeypatch.setattr(dense.engine, "generate", broken)
    response = httpx.post(f"{dense.url}/generate", json={"prompt_ids": [1]})
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "server_error"
    monkeypatch.undo()
    assert len(generate(dense, [1, 2], max_tokens=2)["token_ids"]) == 2


def test_value_error_inside_a_decode_step_is_a_500(
    dense: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Only InvalidRequest is the client's fault; any other ValueError is the server's.
    real_sample = engine_module.sample
    calls = 0

    def sample_then_fail(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls > 1:  # the prefill samples the first token; the first decode step fails
            raise ValueError("probabilities contain nan")
        return real_sample(*args)

    monkeypatch.setattr(engine_module, "sample", sample_then_fail)
    body = {"prompt_ids": [1, 2], "sampling": {"max_tokens": 4}}
    response = httpx.post(f"{dense.url}/generate", json=body, timeout=60)
    assert response.status_code == 500, response.text
    error = response.json()["error"]
    assert error["type"] == "server_error" and "ValueError" in error["message"]
    assert calls == 2
    monkeypatch.undo()
    assert len(generate(dense, [1, 2], max_tokens=2)["token_ids"]) == 2


def test_invalid_request_from_the_engine_is_a_400(
    dense: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def refuse(*args: Any, **kwargs: Any) -> Completion:
        raise InvalidRequest("this prompt is refused")

    monkeypatch.setattr(dense.engine, "generate", refuse)
    for path, body in [("/generate", {"prompt_ids": [1]}), ("/v1/completions", {"prompt": "a"})]:
        error = assert_error(httpx.post(f"{dense.url}{path}", json=body), 400)
        assert error["message"] == "this prompt is refused"


def test_generate_seed_out_of_range_is_a_400_naming_seed(dense: Served) -> None:
    body = {"prompt_ids": [1], "sampling": {"seed": 2**64}}
    error = assert_error(httpx.post(f"{dense.url}/generate", json=body), 400)
    assert "seed" in error["message"]


# -- the command line --------------------------------------------------------------------


@dataclass
class CliServer:
    """A `fleetrl serve` process: where it listens, and its stdout once it has ended."""

    url: str
    stdout: str = ""


@contextlib.contextmanager
def cli_server(checkpoint: Path, *options: str, start_s: float = 60) -> Iterator[CliServer]:
    """`fleetrl serve CHECKPOINT --port P OPTIONS` as a user starts it, once it answers
    /health (within `start_s`); terminated on exit, its stdout then in `.stdout`."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "fleetrl.cli", "serve", str(checkpoint), "--port", str(port)]
    process = subprocess.Popen(
        [*command, *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    served = CliServer(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + start_s
        while True:
            assert process.poll() is None, process.communicate()
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{served.url}/health", timeout=1).status_code == 200:
                    break
            assert time.monotonic() < deadline, f"fleetrl serve did not come up in {start_s} s"
            time.sleep(0.2)
        yield served
    finally:
        process.terminate()
        try:
            served.stdout, _ = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()
            raise


def test_cli_serve(dense_dir: Path) -> None:
    with cli_server(dense_dir, "--admin-token", ADMIN_TOKEN, "--threads", "1") as served:
        client = openai.OpenAI(base_url=f"{served.url}/v1", api_key="x", max_retries=0)
        reply = client.chat.completions.create(
            model=dense_dir.name, messages=HI, max_tokens=5, seed=0
        )
        assert reply.model == dense_dir.name
        assert 1 <= reply.usage.completion_tokens <= 5
        assert isinstance(reply.choices[0].message.content, str)
        assert_error(httpx.post(f"{served.url}/update_weights?version=1", content=b""), 401)
    assert served.url in served.stdout


def test_cli_serve_reports_where_it_cannot_listen_before_loading(
    dense_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_loading(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("loaded the model although it cannot listen")

    monkeypatch.setattr(server, "load_pretrained", no_loading)
    runner = CliRunner()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = runner.invoke(app, ["serve", str(dense_dir), "--port", str(port)])
    assert result.exit_code == 2, result.output
    assert f"error: cannot listen on 127.0.0.1:{port}" in result.output
    assert "serving" not in result.output
    # 192.0.2.1 (TEST-NET-1, documentation only) is an address of no machine.
    result = runner.invoke(app, ["serve", str(dense_dir), "--host", "192.0.2.1"])
    assert result.exit_code == 2, result.output
    assert "error: cannot listen on 192.0.2.1:8000" in result.output


def test_the_server_opens_once_its_follower_is_ready(dense_dir: Path, tokenizer: Tokenizer):
    """A following server takes no request before its follower's first sync (a restarted
    server must not answer with the base it loaded while another version is served)."""
    synced: list[bool] = []

    async def follower(stop: asyncio.Event, ready: asyncio.Event) -> None:
        await asyncio.sleep(0.5)  # a fetch and a swap
        synced.append(True)
        ready.set()
        await stop.wait()

    engine = Engine(load_pretrained(dense_dir), max_batch_size=8, max_model_len=MAX_MODEL_LEN)
    app = create_app(engine, tokenizer, "tiny", admin_token=None, background=follower)
    with running(app) as url:
        assert synced == [True]
        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
