"""Hugging Face checkpoint directories in and out, and random initialisation.

A checkpoint directory holds `config.json` and either `model.safetensors` or sharded
`model-0000i-of-0000n.safetensors` files with `model.safetensors.index.json`; tokenizer
files sit beside them. Real Qwen3 / Qwen3-MoE checkpoints load unchanged, and what
`save_pretrained` writes loads in `transformers`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from fleetrl.model.config import ModelConfig
from fleetrl.model.qwen3 import Qwen3

BASE_MODEL = Path(__file__).resolve().parent / "assets" / "base"
# Shipped checkpoints by name: the base, the base continued on the `slip` plan too (it
# retries a refused edit; the demo's starting point), and base-slip fine-tuned inside
# mini-swe-agent (the `mini-swe-agent` preset's starting point).
BUNDLED_MODELS = {
    "base": BASE_MODEL,
    "base-slip": BASE_MODEL.parent / "base-slip",
    "base-mswe": BASE_MODEL.parent / "base-mswe",
    "base-long": BASE_MODEL.parent / "base-long",
}
INDEX_FILE = "model.safetensors.index.json"
SINGLE_FILE = "model.safetensors"

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class CheckpointError(Exception):
    """A checkpoint directory is missing files or does not match its config."""


def resolve_checkpoint(name: str | Path) -> Path:
    """A shipped model's folder for its name (`base`, `base-slip`, `base-mswe`); anything
    else is a checkpoint directory."""
    return BUNDLED_MODELS.get(str(name), Path(name))


def init_model(config: ModelConfig, seed: int = 0, dtype: torch.dtype = torch.float32) -> Qwen3:
    """A randomly initialised model (normal(0, initializer_range), norms at 1), seeded."""
    generator = torch.Generator().manual_seed(seed)
    model = Qwen3(config)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith(".bias"):
                param.zero_()
            else:
                param.normal_(0.0, config.initializer_range, generator=generator)
    return model.to(dtype)


def upcycle(dense: Qwen3, experts: int, top_k: int = 2, seed: int = 0) -> Qwen3:
    """A mixture-of-experts copy of `dense` (sparse upcycling): each layer's MLP becomes
    `experts` copies of itself behind a fresh router (normal(0, initializer_range),
    seeded), every other weight is kept. With the top-k gate weights renormalised, the
    copy computes what `dense` does; training makes the experts diverge, since each sees
    the tokens its router sends it. A cheap start for a small MoE model from a dense one."""
    if dense.config.is_moe:
        raise ValueError("the model is already a mixture of experts")
    config = replace(
        dense.config,
        num_experts=experts,
        num_experts_per_tok=top_k,
        moe_intermediate_size=dense.config.intermediate_size,
        norm_topk_prob=True,
    )
    config.validate()
    moe = Qwen3(config).to(next(dense.parameters()).dtype)
    weights = dense.state_dict()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in moe.state_dict().items():
            if ".mlp.gate.weight" in name:  # the router
                param.copy_(
                    torch.randn(param.shape, generator=generator) * config.initializer_range
                )
            elif ".mlp.experts." in name:  # model.layers.L.mlp.experts.E.up_proj.weight
                layer, _, rest = name.partition(".mlp.experts.")
                param.copy_(weights[f"{layer}.mlp.{rest.split('.', 1)[1]}"])
            else:
                param.copy_(weights[name])
    return moe


def read_config(path: str | Path) -> ModelConfig:
    """The ModelConfig of a checkpoint directory."""
    config_path = Path(path) / "config.json"
    if not config_path.is_file():
        raise CheckpointError(f"{path}: no config.json (not a Hugging Face checkpoint directory)")
    try:
        hf = json.loads(config_path.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{config_path}: invalid JSON: {err}") from err
    try:
        return ModelConfig.from_hf(hf)
    except (ValueError, KeyError, TypeError) as err:
        raise CheckpointError(f"{config_path}: {err}") from err


def _weight_files(path: Path) -> list[Path]:
    index = path / INDEX_FILE
    if index.is_file():
        weight_map = json.loads(index.read_text())["weight_map"]
        return [path / name for name in sorted(set(weight_map.values()))]
    if (path / SINGLE_FILE).is_file():
        return [path / SINGLE_FILE]
    raise CheckpointError(f"{path}: neither {SINGLE_FILE} nor {INDEX_FILE} found")


def weights_digest(path: str | Path) -> str:
    """SHA-256 of a checkpoint's weight files: what results computed from it are keyed by."""
    digest = hashlib.sha256()
    for file in _weight_files(Path(path)):
        digest.update(file.read_bytes())
    return digest.hexdigest()


def checkpoint_dtype(path: str | Path) -> torch.dtype:
    """The dtype a checkpoint declares in config.json (float32 when it says nothing)."""
    hf = json.loads((Path(path) / "config.json").read_text())
    name = hf.get("dtype") or hf.get("torch_dtype") or "float32"
    return DTYPES.get(name, torch.float32)


def load_pretrained(path: str | Path, dtype: torch.dtype | None = None) -> Qwen3:
    """Load a Hugging Face checkpoint directory; `dtype` defaults to the checkpoint's own."""
    path = Path(path)
    config = read_config(path)
    dtype = dtype or checkpoint_dtype(path)
    with torch.device("meta"):
        model = Qwen3(config)
    state: dict[str, torch.Tensor] = {}
    for file in _weight_files(path):
        if not file.is_file():
            raise CheckpointError(f"{file}: listed in the index but missing")
        state.update(load_file(file))
    if config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    expected = set(model.state_dict())
    if config.tie_word_embeddings:
        expected.discard("lm_head.weight")
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise CheckpointError(
            f"{path}: weights do not match config.json: missing {sorted(missing)[:5]}, "
            f"unexpected {sorted(unexpected)[:5]}"
        )
    state = {name: tensor.to(dtype) for name, tensor in state.items()}
    model.load_state_dict(state, strict=False, assign=True)
    if config.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval()


def save_pretrained(
    model: Qwen3,
    path: str | Path,
    max_shard_bytes: int = 2 * 1024**3,
    state: dict[str, torch.Tensor] | None = None,
) -> None:
    """Write `model` as a Hugging Face checkpoint (sharded above `max_shard_bytes`);
    `state`: its weights where the model holds only a shard of them (gathered)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    state = {
        name: tensor.detach().contiguous().cpu()
        for name, tensor in (model.state_dict() if state is None else state).items()
        if not (model.config.tie_word_embeddings and name == "lm_head.weight")
    }
    dtype = next(iter(state.values())).dtype
    dtype_name = {v: k for k, v in DTYPES.items()}.get(dtype, "float32")
    (path / "config.json").write_text(json.dumps(model.config.to_hf(dtype_name), indent=2))
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name, tensor in state.items():
        nbytes = tensor.numel() * tensor.element_size()
        if shards[-1] and size + nbytes > max_shard_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensor
        size += nbytes
    metadata = {"format": "pt"}
    if len(shards) == 1:
        save_file(shards[0], path / SINGLE_FILE, metadata=metadata)
        (path / INDEX_FILE).unlink(missing_ok=True)
        return
    weight_map = {}
    for i, shard in enumerate(shards, start=1):
        name = f"model-{i:05d}-of-{len(shards):05d}.safetensors"
        save_file(shard, path / name, metadata=metadata)
        weight_map.update(dict.fromkeys(shard, name))
    total = sum(t.numel() * t.element_size() for t in state.values())
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (path / INDEX_FILE).write_text(json.dumps(index, indent=2))
    (path / SINGLE_FILE).unlink(missing_ok=True)
