import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetrl.model.chat import (
    Message,
    ParsedReply,
    ToolCall,
    encode_chat,
    format_reply,
    format_tool_call,
    parse_reply,
    render_chat,
)
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer

READ_FILE = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
}
RUN = {"name": "run", "description": "Run a command.", "parameters": {"type": "object"}}
TOOLS = [READ_FILE, RUN]

CONVERSATION = [
    Message("system", "You are a coding agent."),
    Message("user", "Fix a.py"),
    Message(
        "assistant",
        "Let me look.",
        [ToolCall("read_file", {"path": "a.py"}), ToolCall("run", {"command": "pytest -q"})],
    ),
    Message("tool", "x = 1"),
    Message("tool", "1 failed"),
]

EXPECTED = (
    "<|im_start|>system\n"
    "You are a coding agent.\n"
    "\n"
    "# Tools\n"
    "\n"
    "You may call one or more functions to assist with the user query.\n"
    "\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n"
    "<tools>\n"
    '{"type": "function", "function": {"name": "read_file", "description": "Read a file.", '
    '"parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}}\n'
    '{"type": "function", "function": {"name": "run", "description": "Run a command.", '
    '"parameters": {"type": "object"}}}\n'
    "</tools>\n"
    "\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    "<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "Fix a.py<|im_end|>\n"
    "<|im_start|>assistant\n"
    "Let me look.\n"
    "<tool_call>\n"
    '{"name": "read_file", "arguments": {"path": "a.py"}}\n'
    "</tool_call>\n"
    "<tool_call>\n"
    '{"name": "run", "arguments": {"command": "pytest -q"}}\n'
    "</tool_call><|im_end|>\n"
    "<|im_start|>user\n"
    "<tool_response>\n"
    "x = 1\n"
    "</tool_response>\n"
    "<tool_response>\n"
    "1 failed\n"
    "</tool_response><|im_end|>\n"
    "<|im_start|>assistant\n"
)


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return bundled_tokenizer()


def test_render_full_conversation():
    assert render_chat(CONVERSATION, TOOLS) == EXPECTED
    without_prompt = render_chat(CONVERSATION, TOOLS, add_generation_prompt=False)
    assert without_prompt + "<|im_start|>assistant\n" == EXPECTED


def test_render_plain_chat_and_tools_without_system():
    messages = [Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Yo")]
    assert render_chat(messages, add_generation_prompt=False) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        "<|im_start|>user\nHi<|im_end|>\n"
        "<|im_start|>assistant\nYo<|im_end|>\n"
    )
    with_tools = render_chat([Message("user", "Hi")], [RUN])
    assert with_tools.startswith("<|im_start|>system\n# Tools\n\n")
    assert with_tools.endswith("</tool_call><|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
                               "<|im_start|>assistant\n")  # fmt: skip
    assert render_chat([], []) == "<|im_start|>assistant\n"  # no tools block for empty tools


def test_bare_tool_spec_renders_like_wrapped_one():
    messages = [Message("user", "x")]
    assert render_chat(messages, [RUN]) == render_chat(
        messages, [{"type": "function", "function": RUN}]
    )


def test_render_rejects_unknown_role():
    with pytest.raises(ValueError, match="unknown message role 'robot'"):
        render_chat([Message("robot", "beep")])  # type: ignore[arg-type]


def test_format_tool_call_keeps_unicode():
    call = ToolCall("write_file", {"path": "ü.py", "content": "π = 3\n"})
    assert format_tool_call(call) == (
        '<tool_call>\n{"name": "write_file", "arguments": {"path": "ü.py", "content": "π = 3\\n"}}'
        "\n</tool_call>"
    )


def assert_prefix_stable(tok: Tokenizer, messages: list[Message], tools: list[dict] | None):
    """Before every assistant message, prompt + sampled reply is a prefix of the full encoding."""
    full = encode_chat(tok, messages, tools, add_generation_prompt=False)
    assert tok.decode(full) == render_chat(messages, tools, add_generation_prompt=False)
    for k, message in enumerate(messages):
        if message.role != "assistant":
            continue
        prompt = encode_chat(tok, messages[:k], tools)
        sampled = tok.encode(format_reply(message) + "<|im_end|>")  # the engine stops at eos
        assert sampled[-1] == tok.eos_id
        turn = encode_chat(tok, messages[: k + 1], tools, add_generation_prompt=False)
        assert turn == prompt + sampled + tok.encode("\n")
        assert full[: len(turn)] == turn


def test_prefix_stable_with_tool_calls_and_whitespace(tok):
    messages = [
        *CONVERSATION,
        Message("assistant", "\n    indented 42", [ToolCall("run", {"command": "ls  -la"})]),
        Message("tool", "  a.py\n\n"),
        Message("assistant", "  "),
        Message("user", "\n\nthanks "),
        Message("assistant", "", [ToolCall("read_file", {"path": " b.py"})]),
    ]
    assert_prefix_stable(tok, messages, TOOLS)
    assert_prefix_stable(tok, messages[1:], None)


def test_encoding_the_whole_string_would_not_be_prefix_stable(tok):
    # Why encode_chat tokenises segment by segment: BPE merges the prompt's "\n" with a
    # reply that starts with spaces, so the prompt's ids would change after sampling.
    messages = [Message("user", "hi"), Message("assistant", "    x = 1")]
    prompt = tok.encode(render_chat(messages[:1]))
    whole = tok.encode(render_chat(messages, add_generation_prompt=False))
    assert whole[: len(prompt)] != prompt
    assert encode_chat(tok, messages, add_generation_prompt=False)[: len(prompt)] == prompt


texts = st.text(alphabet=st.sampled_from(list(" \n\tab_1{}\"'é🎉")), max_size=12) | st.text(
    max_size=12
)
calls = st.builds(
    ToolCall,
    name=st.sampled_from(["read_file", "run"]),
    arguments=st.dictionaries(st.text(max_size=4), texts, max_size=2),
)
conversations = st.lists(
    st.builds(Message, st.just("user"), texts)
    | st.builds(Message, st.just("tool"), texts)
    | st.builds(Message, st.just("assistant"), texts, st.lists(calls, max_size=2)),
    min_size=1,
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(messages=conversations, with_tools=st.booleans())
def test_prefix_stable_for_random_conversations(tok, messages, with_tools):
    assert_prefix_stable(tok, messages, TOOLS if with_tools else None)


def test_parse_reply_with_content_and_calls():
    text = (
        "Let me look.\n"
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a.py"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "run", "arguments": "{\\"command\\": \\"ls\\"}"}\n</tool_call>\n'
        '<tool_call>{"name": "done"}</tool_call><|im_end|>'
    )
    assert parse_reply(text) == ParsedReply(
        content="Let me look.",
        tool_calls=[
            ToolCall("read_file", {"path": "a.py"}),
            ToolCall("run", {"command": "ls"}),  # arguments given as a JSON string
            ToolCall("done", {}),  # missing arguments
        ],
        errors=[],
    )


def test_parse_reply_plain_text():
    assert parse_reply("  Just text.\n<|im_end|>") == ParsedReply("Just text.", [], [])
    assert parse_reply("") == ParsedReply("", [], [])


def test_parse_reply_reports_each_malformed_call_and_keeps_valid_ones():
    good = '<tool_call>\n{"name": "ok", "arguments": {"n": %d}}\n</tool_call>'
    bad_calls = [
        '<tool_call>\n{"name": "x" "arguments": {}}\n</tool_call>',
        "<tool_call>\n[1, 2]\n</tool_call>",
        '<tool_call>\n{"arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": 7, "arguments": {}}\n</tool_call>',
        '<tool_call>\n{"name": "x", "arguments": [1]}\n</tool_call>',
        '<tool_call>\n{"name": "x", "arguments": "{oops"}\n</tool_call>',
        '<tool_call>\n{"name": "x", "arguments": "[1]"}\n</tool_call>',
        "<tool_call>\n" + "[" * 100_000 + "\n</tool_call>",
    ]
    text = "Working.\n" + good % 0 + "".join(bad + good % i for i, bad in enumerate(bad_calls, 1))
    reply = parse_reply(text)
    assert reply.content == "Working."
    assert reply.tool_calls == [ToolCall("ok", {"n": i}) for i in range(len(bad_calls) + 1)]
    assert reply.errors[0] == (
        "tool call 2: invalid JSON: Expecting ',' delimiter: line 1 column 14 (char 13)"
    )
    assert reply.errors[1].startswith("tool call 4: expected a JSON object")
    assert reply.errors[2] == 'tool call 6: "name" must be a non-empty string'
    assert reply.errors[3] == 'tool call 8: "name" must be a non-empty string'
    assert reply.errors[4] == 'tool call 10: "arguments" must be a JSON object'
    assert reply.errors[5].startswith('tool call 12: "arguments" is a string but not valid JSON')
    assert reply.errors[6] == 'tool call 14: "arguments" must be a JSON object'
    assert reply.errors[7].startswith("tool call 16: invalid JSON")
    assert len(reply.errors) == len(bad_calls)


def test_parse_reply_unbalanced_tags():
    ok = '<tool_call>{"name": "a", "arguments": {}}</tool_call>'
    reply = parse_reply(f"x </tool_call> y <tool_call> {ok} <tool_call>{{")
    assert reply.tool_calls == [ToolCall("a", {})]
    assert reply.content == "x  y"
    assert reply.errors == [
        "</tool_call> without a matching <tool_call>",
        "tool call 1: <tool_call> opened again before closing",
        "tool call 3: <tool_call> is never closed",
    ]
    nested = parse_reply(f"<tool_call>{ok}</tool_call>")
    assert nested.tool_calls == [ToolCall("a", {})]
    assert nested.errors == [
        "tool call 1: <tool_call> opened again before closing",
        "</tool_call> without a matching <tool_call>",
    ]


FRAGMENTS = ["<tool_call>", "</tool_call>", "<|im_end|>", "{", "}", "[", "]", ":", ",", "\n", " "]
FRAGMENTS += ['"name"', '"arguments"', '"x"', '"{}"', "1", "null"]
tag_soup = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=3), max_size=40).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.text() | tag_soup)
def test_parse_reply_never_raises(text):
    reply = parse_reply(text)
    opened = text.count("<tool_call>")
    assert len(reply.tool_calls) <= opened <= len(reply.tool_calls) + len(reply.errors)
    for call in reply.tool_calls:
        assert isinstance(call.name, str) and call.name
        assert isinstance(call.arguments, dict)
    assert all(isinstance(error, str) and error for error in reply.errors)


safe_text = st.text(st.characters(blacklist_characters="<"), max_size=8)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | safe_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(safe_text, children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    content=st.text().map(str.strip).filter(lambda s: "tool_call>" not in s),
    calls=st.lists(
        st.builds(
            ToolCall,
            name=safe_text.filter(bool),
            arguments=st.dictionaries(safe_text, json_values, max_size=3),
        ),
        max_size=3,
    ),
)
def test_parse_reply_inverts_format_reply(content, calls):
    text = format_reply(Message("assistant", content, calls)) + "<|im_end|>"
    assert parse_reply(text) == ParsedReply(content, calls, [])
