"""The policy's chat format: Qwen3-style ChatML with tool calls, as plain Python.

A conversation with tools renders like this (`add_generation_prompt=True` adds the last line):

    <|im_start|>system
    {system content}

    # Tools

    You may call one or more functions to assist with the user query.

    You are provided with function signatures within <tools></tools> XML tags:
    <tools>
    {one json per tool, one per line}
    </tools>

    For each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:
    <tool_call>
    {"name": <function-name>, "arguments": <args-json-object>}
    </tool_call><|im_end|>
    <|im_start|>user
    {content}<|im_end|>
    <|im_start|>assistant
    {content}
    <tool_call>
    {"name": "read_file", "arguments": {"path": "a.py"}}
    </tool_call><|im_end|>
    <|im_start|>user
    <tool_response>
    {tool result}
    </tool_response><|im_end|>
    <|im_start|>assistant

This is Qwen3's published template without its `<think>` handling: tool results go into a
user turn (consecutive tool messages share one), a tool call follows the content after a
newline, and with tools but no system message the tools block is the system message.

Prefix stability. The RL harness samples an assistant reply, appends the tool results, samples
again, and the trainer trains on exactly the sampled ids. So `encode_chat` must agree with
that token stream, not just with the rendered string. It renders the chat as segments and
tokenises each one on its own; the generation prompt `<|im_start|>assistant\\n` is one segment
and the reply `format_reply(message) + "<|im_end|>\\n"` the next. Hence:

- `encode_chat(messages[:k])` (with the generation prompt) is a prefix of
  `encode_chat(messages)` whenever `messages[k]` is an assistant message;
- the reply's ids are `encode(format_reply(message) + "<|im_end|>")` followed by
  `encode("\\n")`. The engine stops at `<|im_end|>` and never samples that newline; the
  harness appends it with the next turn. `<|im_end|>` is a special token, where the
  tokenizer cuts the text before BPE, so the newline's ids are the same either way.

Without the separate segments BPE could merge the prompt's newline with a reply that starts
with whitespace, so `encode(render_chat(...))` may differ from `encode_chat(...)` there;
`encode_chat` is the reference. Stability does not hold between two tool messages of one
group, which share a user turn: append all results of a turn at once.
"""  # noqa: E501

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

Role = Literal["system", "user", "assistant", "tool"]

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
GENERATION_PROMPT = "<|im_start|>assistant\n"
# One user turn of a rendered chat, its text in group 1 (what scripted experts read).
USER_TURN = re.compile(re.escape(f"{IM_START}user\n") + "(.*?)" + re.escape(IM_END), re.DOTALL)

TOOLS_HEADER = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_FOOTER = (
    "\n</tools>\n\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)

# The same format as a Jinja template, for tokenizer_config.json, so that Hugging Face's
# `apply_chat_template` renders what `render_chat` renders. Messages are dicts; a tool call
# is {"name", "arguments"} or OpenAI's {"type": "function", "function": {...}}.
CHAT_TEMPLATE = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages and messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>' }}
    {%- for tool in tools %}
        {{- '\n' }}
        {%- if tool.function is defined %}
            {{- tool | tojson }}
        {%- else %}
            {{- {'type': 'function', 'function': tool} | tojson }}
        {%- endif %}
    {%- endfor %}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' }}
{%- elif messages and messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'assistant' %}
        {{- '<|im_start|>assistant\n' + message.content }}
        {%- for call in message.tool_calls or [] %}
            {%- if message.content or not loop.first %}
                {{- '\n' }}
            {%- endif %}
            {%- if call.function is defined %}
                {%- set call = call.function %}
            {%- endif %}
            {{- '<tool_call>\n' + ({'name': call.name, 'arguments': call.arguments} | tojson) + '\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + message.content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- elif not (loop.first and message.role == 'system') %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}"""  # noqa: E501


@dataclass
class ToolCall:
    """One function call made by the assistant."""

    name: str
    arguments: dict[str, Any]


@dataclass
class Message:
    """One chat message. `tool_calls` is only rendered for assistant messages."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)


@dataclass
class ParsedReply:
    """A generated assistant reply split into plain content, valid calls and problems found."""

    content: str
    tool_calls: list[ToolCall]
    errors: list[str]


def format_tool_call(call: ToolCall) -> str:
    """Render one call as `<tool_call>\\n{json}\\n</tool_call>`, the way the model writes it."""
    payload = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def format_reply(message: Message) -> str:
    """Render an assistant message's content and calls, without the closing `<|im_end|>`.

    This is the text the model generates for the message; `parse_reply` inverts it.
    """
    parts = [message.content] if message.content else []
    parts += [format_tool_call(call) for call in message.tool_calls]
    return "\n".join(parts)


def _tool_spec(tool: dict[str, Any]) -> dict[str, Any]:
    """Wrap a bare {"name", "description", "parameters"} spec in OpenAI's function envelope."""
    return tool if "function" in tool else {"type": "function", "function": tool}


def _segments(
    messages: list[Message], tools: list[dict[str, Any]] | None, add_generation_prompt: bool
) -> list[str]:
    """The rendered chat as a list of strings that are tokenised one by one (see the module doc)."""
    segments = []
    rest = messages
    if tools:
        system = ""
        if messages and messages[0].role == "system":
            system, rest = messages[0].content + "\n\n", messages[1:]
        specs = "".join("\n" + json.dumps(_tool_spec(t), ensure_ascii=False) for t in tools)
        segments.append(f"{IM_START}system\n{system}{TOOLS_HEADER}{specs}{TOOLS_FOOTER}{IM_END}\n")
    for i, message in enumerate(rest):
        if message.role == "assistant":
            segments.append(GENERATION_PROMPT)
            segments.append(format_reply(message) + IM_END + "\n")
        elif message.role == "tool":
            opens_turn = i == 0 or rest[i - 1].role != "tool"
            closes_turn = i == len(rest) - 1 or rest[i + 1].role != "tool"
            segments.append(
                (f"{IM_START}user" if opens_turn else "")
                + f"\n<tool_response>\n{message.content}\n</tool_response>"
                + (f"{IM_END}\n" if closes_turn else "")
            )
        elif message.role in ("system", "user"):
            segments.append(f"{IM_START}{message.role}\n{message.content}{IM_END}\n")
        else:
            raise ValueError(f"unknown message role {message.role!r}")
    if add_generation_prompt:
        segments.append(GENERATION_PROMPT)
    return segments


def render_chat(
    messages: list[Message],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """Render a conversation as the model sees it.

    `tools` are OpenAI-style function specs ({"type": "function", "function": {...}}) or bare
    {"name", "description", "parameters"} dicts. With `add_generation_prompt` the text ends
    with `<|im_start|>assistant\\n`, ready for the model to write the next reply.
    """
    return "".join(_segments(messages, tools, add_generation_prompt))


class TextEncoder(Protocol):
    """What encoding a chat needs of a tokenizer (`fleetrl.model.tokenizer.Tokenizer` is one)."""

    def encode(self, text: str) -> list[int]: ...


def encode_chat(
    tokenizer: TextEncoder,
    messages: list[Message],
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
) -> list[int]:
    """Token ids of `render_chat(...)`, tokenised segment by segment so that they are prefix
    stable across assistant turns (see the module docstring)."""
    ids: list[int] = []
    for segment in _segments(messages, tools, add_generation_prompt):
        ids += tokenizer.encode(segment)
    return ids


def encode_continuation(tokenizer: TextEncoder, messages: list[Message]) -> list[int]:
    """Ids that follow a sampled assistant reply (which ended at `<|im_end|>`): the newline
    closing that turn, `messages` (tool results, user turns), and a new generation prompt.

    Appending these to the sampled ids gives exactly `encode_chat` of the whole conversation,
    without re-rendering the reply the model wrote (which may not be in canonical form).
    """
    return tokenizer.encode("\n") + encode_chat(tokenizer, messages, add_generation_prompt=True)


def _parse_call(payload: str, number: int) -> ToolCall | str:
    """Parse the JSON between one pair of tool-call tags into a ToolCall, or an error message."""
    prefix = f"tool call {number}:"
    try:
        obj = json.loads(payload.strip())  # strip, so error positions count from the JSON
    except (ValueError, RecursionError) as e:  # JSONDecodeError is a ValueError
        return f"{prefix} invalid JSON: {e}"
    if not isinstance(obj, dict):
        return f'{prefix} expected a JSON object {{"name": ..., "arguments": {{...}}}}'
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return f'{prefix} "name" must be a non-empty string'
    arguments = obj.get("arguments", {})
    if isinstance(arguments, str):  # some models send the arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError) as e:
            return f'{prefix} "arguments" is a string but not valid JSON: {e}'
    if not isinstance(arguments, dict):
        return f'{prefix} "arguments" must be a JSON object'
    return ToolCall(name=name, arguments=arguments)


_TOOL_RESPONSE = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


def tool_results(text: str) -> list[str]:
    """The tool results rendered in `text` (decoded context, as `encode_continuation`
    writes them), in order."""
    return _TOOL_RESPONSE.findall(text)


def parse_reply(text: str) -> ParsedReply:
    """Split generated assistant text into content and tool calls; never raises.

    Each `<tool_call>...</tool_call>` holds `{"name": str, "arguments": object}` (missing
    arguments mean {}; arguments given as a JSON string of an object are accepted). Each
    malformed call becomes a readable entry in `errors` for the harness to show the model,
    and the valid calls around it are still returned in order. A `<tool_call>` opened again
    before it was closed counts as unclosed, and parsing resumes at the new one. Content is the
    text outside the calls, stripped; a trailing `<|im_end|>` is dropped. For a reply written by
    `format_reply` with stripped content, parsing gives the message back.
    """
    text = text.removesuffix(IM_END)
    content: list[str] = []
    calls: list[ToolCall] = []
    errors: list[str] = []
    number = 0  # 1-based index of the current <tool_call> tag, used in error messages
    pos = 0
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        stray = text.find(TOOL_CALL_CLOSE, pos)
        if stray != -1 and (start == -1 or stray < start):
            content.append(text[pos:stray])
            errors.append(f"{TOOL_CALL_CLOSE} without a matching {TOOL_CALL_OPEN}")
            pos = stray + len(TOOL_CALL_CLOSE)
            continue
        if start == -1:
            content.append(text[pos:])
            break
        content.append(text[pos:start])
        number += 1
        body_start = start + len(TOOL_CALL_OPEN)
        end = text.find(TOOL_CALL_CLOSE, body_start)
        reopened = text.find(TOOL_CALL_OPEN, body_start)
        if reopened != -1 and (end == -1 or reopened < end):
            errors.append(f"tool call {number}: {TOOL_CALL_OPEN} opened again before closing")
            pos = reopened
            continue
        if end == -1:
            errors.append(f"tool call {number}: {TOOL_CALL_OPEN} is never closed")
            break
        call = _parse_call(text[body_start:end], number)
        if isinstance(call, ToolCall):
            calls.append(call)
        else:
            errors.append(call)
        pos = end + len(TOOL_CALL_CLOSE)
    return ParsedReply(content="".join(content).strip(), tool_calls=calls, errors=errors)
