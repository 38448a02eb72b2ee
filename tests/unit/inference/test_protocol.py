"""The wire format without a server: stop strings, token offsets, tool calls, request messages."""

import json

import pytest
from openai.types.chat.chat_completion import Choice as OpenAIChatChoice
from openai.types.completion_choice import CompletionChoice as OpenAICompletionChoice

from fleetrl.inference.protocol import (
    ChatMessage,
    chat_choice,
    completion_choice,
    decode_until_stop,
    to_messages,
)
from fleetrl.model.chat import Message, ToolCall
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer
from fleetrl.types import Completion, InvalidRequest


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return bundled_tokenizer()


def completion_of(token_ids: list[int], finish_reason: str = "stop") -> Completion:
    n = len(token_ids)
    return Completion([1], token_ids, [-0.5] * n, [3] * n, finish_reason)


def test_a_split_character_belongs_to_the_token_that_completes_it(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("a𝔘b")  # "a", the four bytes of "𝔘", "b"
    assert len(ids) == 6
    decoded = decode_until_stop(tokenizer, ids, [])
    assert decoded.text == "a𝔘b" and decoded.n_tokens == 6 and not decoded.stopped
    assert decoded.offsets == [0, 1, 1, 1, 1, 2]


def test_stop_string_cuts_the_text_but_keeps_the_token_that_completed_it(
    tokenizer: Tokenizer,
) -> None:
    ids = tokenizer.encode("x = 1𝔘yz")
    decoded = decode_until_stop(tokenizer, ids, ["never", "𝔘"])
    assert decoded.text == "x = 1" and decoded.stopped
    assert tokenizer.decode(ids[: decoded.n_tokens]) == "x = 1𝔘"
    assert len(decoded.offsets) == decoded.n_tokens


def test_completion_choice_fits_the_openai_type(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("def f():\n    return 1")
    completion = completion_of(ids, "length")
    completion.top_logprobs = [{i: -0.5} for i in ids]
    choice = completion_choice(tokenizer, 2, completion, ["return"], logprobs=1)
    parsed = OpenAICompletionChoice.model_validate(choice)
    assert parsed.index == 2 and parsed.text == "def f():\n    " and parsed.finish_reason == "stop"
    assert "".join(parsed.logprobs.tokens) == tokenizer.decode(choice["token_ids"])
    assert choice["versions"] == [3] * len(choice["token_ids"])


def test_chat_choice_turns_tool_call_text_into_openai_tool_calls(tokenizer: Tokenizer) -> None:
    text = 'Let me look.\n<tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>'
    ids = [*tokenizer.encode(text), tokenizer.eos_id]
    choice = chat_choice(tokenizer, 0, completion_of(ids), ["<|im_end|>"], top_logprobs=0)
    parsed = OpenAIChatChoice.model_validate(choice)  # the openai client's own type
    assert parsed.finish_reason == "tool_calls"
    assert parsed.message.content == "Let me look."
    [call] = parsed.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "f" and json.loads(call.function.arguments) == {"a": 1}
    assert choice["token_ids"] == ids and choice["versions"] == [3] * len(ids)
    assert [e.logprob for e in parsed.logprobs.content] == [-0.5] * len(ids)

    plain = completion_of(ids[:3], "length")
    choice = chat_choice(tokenizer, 0, plain, ["<|im_end|>"], top_logprobs=None)
    assert choice["finish_reason"] == "length" and "tool_calls" not in choice["message"]
    assert choice["message"]["content"] == tokenizer.decode(ids[:3])


def test_to_messages_joins_text_parts_and_parses_tool_calls() -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    messages = [
        ChatMessage.model_validate({"role": "user", "content": parts}),
        ChatMessage.model_validate({"role": "assistant", "tool_calls": [call]}),
    ]
    assert to_messages(messages) == [
        Message("user", "a\nb"),
        Message("assistant", "", [ToolCall("f", {"a": 1})]),
    ]


@pytest.mark.parametrize("arguments", ["{", "[1, 2]"])
def test_to_messages_refuses_tool_arguments_that_are_no_json_object(arguments: str) -> None:
    call = {"type": "function", "function": {"name": "f", "arguments": arguments}}
    message = ChatMessage.model_validate({"role": "assistant", "tool_calls": [call]})
    with pytest.raises(InvalidRequest, match="tool call arguments"):
        to_messages([message])
