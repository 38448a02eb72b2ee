"""The policy's tokenizer: a thin wrapper around a Hugging Face `tokenizers.Tokenizer`.

fleetrl ships a small byte-level BPE tokenizer (1024 ids) for tests and toy runs, trained on a
fixed list of Python standard-library modules plus synthetic agent conversations. It uses
the same special tokens as Qwen3, whose `tokenizer.json` `Tokenizer.from_pretrained` loads
just as well. The bundled asset is regenerated with

    .venv/bin/python -m fleetrl.model.tokenizer fleetrl/model/assets

and `tests/unit/model/test_tokenizer.py` checks that this reproduces it. The stdlib sources
come from the running interpreter, so the asset records the Python version it was built with.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import platform
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

from fleetrl.model.chat import CHAT_TEMPLATE, Message, ToolCall, render_chat

ASSET_DIR = Path(__file__).parent / "assets"

PAD_TOKEN = "<|endoftext|>"
EOS_TOKEN = "<|im_end|>"  # ends an assistant turn; the engine stops sampling there
# Special tokens of the bundled tokenizer, ids 0..6 in this order.
SPECIAL_TOKENS = [
    PAD_TOKEN,
    "<|im_start|>",
    EOS_TOKEN,
    "<tool_call>",
    "</tool_call>",
    "<tool_response>",
    "</tool_response>",
]

# Plain-Python stdlib modules present in CPython 3.11 and later: the bundled corpus.
CORPUS_MODULES = [
    "abc",
    "argparse",
    "ast",
    "base64",
    "bisect",
    "calendar",
    "colorsys",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "getopt",
    "glob",
    "graphlib",
    "heapq",
    "hmac",
    "ipaddress",
    "json.decoder",
    "json.encoder",
    "keyword",
    "linecache",
    "numbers",
    "operator",
    "pprint",
    "queue",
    "random",
    "sched",
    "shlex",
    "shutil",
    "statistics",
    "string",
    "textwrap",
    "tokenize",
    "traceback",
    "uuid",
    "warnings",
    "weakref",
]

# Tools of the synthetic conversations, so the chat markup and tool-call JSON get merges.
CORPUS_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Relative path."}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Replace the content of a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_command",
            "description": "Run a shell command in the repository root.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
]


class Tokenizer:
    """Text <-> token ids, with the chat special tokens looked up by name.

    Special tokens written in the text (e.g. `<|im_start|>`) encode to their single ids.
    """

    def __init__(self, backend: tokenizers.Tokenizer):
        self.backend = backend

    @classmethod
    def from_file(cls, path: str | Path) -> Tokenizer:
        """Load a `tokenizer.json` file."""
        return cls(tokenizers.Tokenizer.from_file(str(path)))

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> Tokenizer:
        """Load `directory/tokenizer.json`, e.g. a model checkpoint directory."""
        path = Path(directory) / "tokenizer.json"
        if not path.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {directory} (looked for {path})")
        return cls.from_file(path)

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`; no BOS/EOS is added."""
        return self.backend.encode(text, add_special_tokens=False).ids

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        """Text of `ids`; `decode(encode(text)) == text` for any text."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    @property
    def vocab_size(self) -> int:
        """Number of ids, special tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str) -> int | None:
        """Id of a token string, or None if it is not in the vocabulary."""
        return self.backend.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        """Token string of an id, or None if the id is out of range."""
        return self.backend.id_to_token(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """The exact UTF-8 bytes that token `token_id` contributes to decoded text.

        Text has to line up with tokens wherever one reports per-token text (logprobs,
        offsets, cutting at stop strings), and a byte-level token can hold just part of a
        multi-byte character, so its bytes need not be valid UTF-8 on their own. Joining the
        bytes of a sequence and decoding them gives `decode` of that sequence. A special token
        gives its text; an id the tokenizer lacks (e.g. a model's padding rows past the
        vocabulary) gives b"", as `decode` skips it.
        """
        return self._bytes_by_id.get(token_id, b"")

    @functools.cached_property
    def _bytes_by_id(self) -> dict[int, bytes]:
        """`token_bytes` of every id, built on first use (Qwen has ~150k ids)."""
        byte_of = _byte_level_alphabet()
        table: dict[int, bytes] = {}
        for token, token_id in self.backend.get_vocab(with_added_tokens=False).items():
            if all(char in byte_of for char in token):
                table[token_id] = bytes(byte_of[char] for char in token)
            else:  # not a byte-level vocabulary: the token's decoded text
                table[token_id] = self.decode([token_id]).encode()
        for token_id, added in self.backend.get_added_tokens_decoder().items():
            table[token_id] = added.content.encode()
        return table

    def _required_id(self, token: str) -> int:
        """Id of a token the chat format needs, with a clear error if the vocabulary lacks it."""
        token_id = self.token_to_id(token)
        if token_id is None:
            raise ValueError(f"tokenizer has no {token!r} token; fleetrl needs ChatML tokens")
        return token_id

    @property
    def eos_id(self) -> int:
        """Id of `<|im_end|>`, which ends an assistant turn."""
        return self._required_id(EOS_TOKEN)

    @property
    def pad_id(self) -> int:
        """Id of `<|endoftext|>`, used to pad batches."""
        return self._required_id(PAD_TOKEN)

    @property
    def special_ids(self) -> set[int]:
        """Ids of all special tokens (added tokens flagged special)."""
        added = self.backend.get_added_tokens_decoder()
        return {token_id for token_id, token in added.items() if token.special}

    def save(self, directory: str | Path, extra_config: dict[str, Any] | None = None) -> None:
        """Write `tokenizer.json` and a `tokenizer_config.json` for Hugging Face.

        `transformers.AutoTokenizer.from_pretrained(directory)` then loads the same ids, with
        `<|im_end|>` as eos, `<|endoftext|>` as pad and fleetrl's chat template.
        `extra_config` entries are added to the config.
        """
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(directory / "tokenizer.json"))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": EOS_TOKEN,
            "pad_token": PAD_TOKEN,
            "clean_up_tokenization_spaces": False,
            "chat_template": CHAT_TEMPLATE,
            **(extra_config or {}),
        }
        text = json.dumps(config, indent=2, ensure_ascii=False) + "\n"
        (directory / "tokenizer_config.json").write_text(text, encoding="utf-8")


def _byte_level_alphabet() -> dict[str, int]:
    """The byte each character of a byte-level BPE vocabulary stands for (GPT-2's mapping).

    Printable Latin-1 bytes stand for themselves; the other 68 bytes are shifted to chr(256)
    onwards, in byte order, so that every token is spelled in printable characters.
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    others = [byte for byte in range(256) if byte not in printable]
    alphabet = {chr(byte): byte for byte in printable}
    alphabet.update({chr(256 + i): byte for i, byte in enumerate(others)})
    return alphabet


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1024) -> Tokenizer:
    """Train a byte-level BPE tokenizer with fleetrl's special tokens (ids 0..6).

    Every byte is in the initial alphabet, so any UTF-8 text round-trips exactly, and digits
    are split one per token. The same texts give the same tokenizer.
    """
    backend = tokenizers.Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    # Training does not split out special tokens as encoding does; cut them out ourselves
    # so that no merges are spent on their spelling.
    special = re.compile("|".join(re.escape(token) for token in SPECIAL_TOKENS))
    pieces = (piece for text in texts for piece in special.split(text))
    backend.train_from_iterator(pieces, trainer=trainer)
    return Tokenizer(backend)


def _synthetic_chat(module: str, source: str) -> str:
    """A rendered agent episode about one module: read it, run its tests, fix it."""
    path = module.replace(".", "/") + ".py"
    snippet = "\n".join(source.splitlines()[:12])
    messages = [
        Message("system", "You are a coding agent. Fix the bug the user describes."),
        Message("user", f"The tests for {path} fail. Please find and fix the bug."),
        Message("assistant", f"Let me read {path}.", [ToolCall("read_file", {"path": path})]),
        Message("tool", snippet),
        Message("assistant", "", [ToolCall("run_command", {"command": f"pytest tests/{path}"})]),
        Message("tool", "1 failed, 12 passed in 0.31s"),
        Message("assistant", "", [ToolCall("write_file", {"path": path, "content": snippet})]),
        Message("tool", f"wrote {len(snippet)} characters"),
        Message("assistant", "The bug is fixed and the tests pass."),
    ]
    return render_chat(messages, tools=CORPUS_TOOLS, add_generation_prompt=False)


def build_bundled_tokenizer() -> Tokenizer:
    """Train the bundled tokenizer: CORPUS_MODULES' sources plus one synthetic chat each."""
    sources = [inspect.getsource(importlib.import_module(name)) for name in CORPUS_MODULES]
    chats = [
        _synthetic_chat(name, source) for name, source in zip(CORPUS_MODULES, sources, strict=True)
    ]
    return train_tokenizer(sources + chats, vocab_size=1024)


def bundled_tokenizer() -> Tokenizer:
    """Load the tokenizer that ships with fleetrl (`fleetrl/model/assets`)."""
    return Tokenizer.from_pretrained(ASSET_DIR)


def main() -> None:
    """Build the bundled tokenizer and save it to the directory given on the command line."""
    if len(sys.argv) != 2:
        sys.exit("usage: python -m fleetrl.model.tokenizer OUT_DIR")
    tokenizer = build_bundled_tokenizer()
    tokenizer.save(sys.argv[1], extra_config={"fleetrl_corpus_python": platform.python_version()})
    print(f"saved a {tokenizer.vocab_size}-token tokenizer to {sys.argv[1]}")


if __name__ == "__main__":
    main()
