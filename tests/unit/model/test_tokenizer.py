import json
import platform
import re
from dataclasses import asdict

import pytest
import tokenizers
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import AutoTokenizer

from fleetrl.model.chat import Message, ToolCall, render_chat
from fleetrl.model.tokenizer import (
    ASSET_DIR,
    SPECIAL_TOKENS,
    Tokenizer,
    build_bundled_tokenizer,
    bundled_tokenizer,
    train_tokenizer,
)

SAMPLE_TEXTS = [
    "def add(a, b):\n    return a + b  # 2024-01-31\n",
    "héllo wörld 🎉 日本語\r\n\ttabs   and  spaces ",
    "<|im_start|>user\nhi<|im_end|>\n<tool_call>\n{}\n</tool_call>",
    "",
]


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return bundled_tokenizer()


def test_special_tokens_are_ids_0_to_6(tok):
    assert [tok.token_to_id(t) for t in SPECIAL_TOKENS] == list(range(7))
    assert [tok.id_to_token(i) for i in range(7)] == SPECIAL_TOKENS
    assert tok.special_ids == set(range(7))
    assert tok.eos_id == tok.token_to_id("<|im_end|>") == 2
    assert tok.pad_id == tok.token_to_id("<|endoftext|>") == 0


def test_vocab_size_is_1024(tok):
    assert tok.vocab_size == 1024
    assert tok.id_to_token(1023) is not None
    assert tok.id_to_token(1024) is None
    assert tok.token_to_id("not a token at all") is None


def test_special_tokens_in_text_encode_to_single_ids(tok):
    ids = tok.encode("<|im_start|>user\nhi<|im_end|>")
    assert ids[0] == 1 and ids[-1] == 2
    assert tok.encode("<tool_call></tool_call><tool_response></tool_response>") == [3, 4, 5, 6]
    assert tok.decode(ids, skip_special_tokens=True) == "user\nhi"


def test_encode_adds_no_bos_or_eos(tok):
    assert tok.encode("") == []
    assert tok.eos_id not in tok.encode("hello")


def test_digits_are_split_one_per_token(tok):
    ids = tok.encode("x = 1234567890")
    tokens = [tok.id_to_token(i) for i in ids]
    assert tokens[-10:] == list("1234567890")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text() | st.sampled_from(SPECIAL_TOKENS)).map("".join))
def test_any_text_round_trips(tok, text):
    assert tok.decode(tok.encode(text)) == text


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(len(SPECIAL_TOKENS), 1023), max_size=24))
def test_token_bytes_join_to_the_decoded_text(tok, ids):
    # Random ids split characters anywhere; invalid UTF-8 is replaced the same way on both sides.
    raw = b"".join(tok.token_bytes(i) for i in ids)
    assert raw.decode("utf-8", errors="replace") == tok.decode(ids)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text() | st.sampled_from(SPECIAL_TOKENS)).map("".join))
def test_token_bytes_of_encoded_text_are_its_utf8(tok, text):
    assert b"".join(tok.token_bytes(i) for i in tok.encode(text)) == text.encode()


def test_token_bytes_of_a_split_character_are_its_parts(tok):
    ids = tok.encode("𝔘")  # 4 UTF-8 bytes, rare enough to stay split into single bytes
    parts = [tok.token_bytes(i) for i in ids]
    assert len(parts) > 1 and b"".join(parts) == "𝔘".encode()
    for part in parts:
        with pytest.raises(UnicodeDecodeError):
            part.decode("utf-8")


def test_token_bytes_of_special_and_unknown_ids(tok):
    specials = [tok.token_bytes(i) for i in range(len(SPECIAL_TOKENS))]
    assert specials == [token.encode() for token in SPECIAL_TOKENS]
    assert tok.token_bytes(tok.vocab_size) == b"" == tok.token_bytes(-1)  # decode skips them too


def test_training_is_deterministic_and_keeps_special_tokens_whole():
    corpus = [
        "<|im_start|>user\nhello world 123<|im_end|>\n" * 20,
        "def f(x):\n    return x\n" * 20,
    ]
    first = train_tokenizer(corpus, vocab_size=280)
    second = train_tokenizer(corpus, vocab_size=280)
    assert first.backend.to_str() == second.backend.to_str()
    assert first.vocab_size == 280
    learned = [t for t in first.backend.get_vocab() if t not in SPECIAL_TOKENS]
    assert not any("im_" in t or "|>" in t for t in learned)  # no merges spent on specials
    assert not any(t.isdigit() and len(t) > 1 for t in learned)


def test_from_pretrained_without_tokenizer_json_fails_clearly(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json in"):
        Tokenizer.from_pretrained(tmp_path)


def test_missing_chat_tokens_raise_clear_error():
    bare = Tokenizer(tokenizers.Tokenizer(tokenizers.models.BPE()))
    with pytest.raises(ValueError, match=re.escape("<|im_end|>")):
        _ = bare.eos_id
    assert bare.special_ids == set()


def test_save_then_from_file_and_hugging_face_give_same_ids(tok, tmp_path):
    tok.save(tmp_path)
    again = Tokenizer.from_file(tmp_path / "tokenizer.json")
    hf = AutoTokenizer.from_pretrained(tmp_path)
    assert hf.is_fast
    assert hf.eos_token == "<|im_end|>" and hf.eos_token_id == tok.eos_id
    assert hf.pad_token == "<|endoftext|>" and hf.pad_token_id == tok.pad_id
    assert len(hf) == tok.vocab_size
    for text in SAMPLE_TEXTS:
        ids = tok.encode(text)
        assert again.encode(text) == ids
        assert hf.encode(text, add_special_tokens=False) == ids
        assert hf.decode(ids) == text


def test_saved_chat_template_matches_render_chat(tok, tmp_path):
    tok.save(tmp_path)
    hf = AutoTokenizer.from_pretrained(tmp_path)
    tools = [
        {"type": "function", "function": {"name": "read_file", "parameters": {}}},
        {"name": "run", "description": "Run a command.", "parameters": {"type": "object"}},
    ]
    plain = [Message("system", "Be brief."), Message("user", "Hi"), Message("assistant", "Hello!")]
    agentic = [
        Message("user", "Fix ä.py"),
        Message("assistant", "Reading.", [ToolCall("read_file", {"path": "ä.py"})]),
        Message("tool", "x = 1"),
        Message("assistant", "", [ToolCall("run", {"cmd": "ls"}), ToolCall("run", {})]),
        Message("tool", "a.py"),
        Message("tool", ""),
        Message("system", "Hurry up."),
    ]
    cases = [(plain, None), (plain, tools), (agentic, tools), (agentic, None)]
    for messages, chat_tools in cases:
        for generation_prompt in (True, False):
            expected = render_chat(messages, chat_tools, generation_prompt)
            rendered = hf.apply_chat_template(
                [asdict(m) for m in messages],
                tools=chat_tools,
                tokenize=False,
                add_generation_prompt=generation_prompt,
            )
            assert rendered == expected


def test_bundled_asset_is_reproducible(tok):
    config = json.loads((ASSET_DIR / "tokenizer_config.json").read_text())
    if config["fleetrl_corpus_python"] != platform.python_version():
        pytest.skip(f"asset built from Python {config['fleetrl_corpus_python']}'s stdlib")
    assert build_bundled_tokenizer().backend.to_str() == tok.backend.to_str()
