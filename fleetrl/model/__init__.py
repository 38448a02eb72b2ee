"""The policy network (Qwen3 dense and MoE), its checkpoints, tokenizer and chat template."""

from fleetrl.model.chat import (
    Message,
    ParsedReply,
    ToolCall,
    encode_chat,
    encode_continuation,
    parse_reply,
    render_chat,
)
from fleetrl.model.checkpoint import CheckpointError, init_model, load_pretrained, save_pretrained
from fleetrl.model.config import ModelConfig
from fleetrl.model.kv_cache import KVCache
from fleetrl.model.qwen3 import ModelOutput, Qwen3
from fleetrl.model.tokenizer import Tokenizer, bundled_tokenizer, train_tokenizer

__all__ = [
    "CheckpointError",
    "KVCache",
    "Message",
    "ModelConfig",
    "ModelOutput",
    "ParsedReply",
    "Qwen3",
    "Tokenizer",
    "ToolCall",
    "bundled_tokenizer",
    "encode_chat",
    "encode_continuation",
    "init_model",
    "load_pretrained",
    "parse_reply",
    "render_chat",
    "save_pretrained",
    "train_tokenizer",
]
