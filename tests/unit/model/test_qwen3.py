"""The policy network against the transformers reference, checkpoints, and router replay."""

import json

import pytest
import torch
import transformers

from fleetrl.model.checkpoint import (
    CheckpointError,
    init_model,
    load_pretrained,
    save_pretrained,
    upcycle,
    weights_digest,
)
from fleetrl.model.config import ModelConfig
from fleetrl.model.qwen3 import decode_attention

torch.set_num_threads(1)


def tiny_config(moe: bool, tied: bool = True) -> ModelConfig:
    return ModelConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        num_experts=8 if moe else 0,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        mlp_only_layers=[1] if moe else [],
        tie_word_embeddings=tied,
        initializer_range=0.1,  # larger than default so the logits differ visibly
    )


def reference_class(moe: bool) -> type:
    return transformers.Qwen3MoeForCausalLM if moe else transformers.Qwen3ForCausalLM


@pytest.mark.parametrize("moe", [False, True], ids=["dense", "moe"])
@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_logits_match_transformers_both_ways(tmp_path, moe, tied):
    ours = init_model(tiny_config(moe, tied), seed=1)
    save_pretrained(ours, tmp_path / "ours")
    ref = reference_class(moe).from_pretrained(tmp_path / "ours", dtype=torch.float32).eval()
    ids = torch.randint(0, 300, (2, 23), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = ref(ids).logits
        assert (ours(ids).logits - expected).abs().max().item() < 1e-4
        # And back: a checkpoint that transformers wrote loads into fleetrl.
        ref.save_pretrained(tmp_path / "theirs")
        again = load_pretrained(tmp_path / "theirs")
        assert (again(ids).logits - expected).abs().max().item() < 1e-4


def test_sharded_checkpoint_round_trip(tmp_path):
    model = init_model(tiny_config(moe=True), seed=2)
    save_pretrained(model, tmp_path, max_shard_bytes=50_000)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 1
    assert not (tmp_path / "model.safetensors").exists()
    loaded = load_pretrained(tmp_path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, loaded.state_dict()[name]), name


def test_weights_digest_is_of_the_weight_files(tmp_path):
    model = init_model(tiny_config(moe=True), seed=2)
    save_pretrained(model, tmp_path / "one")
    save_pretrained(model, tmp_path / "again")
    save_pretrained(model, tmp_path / "sharded", max_shard_bytes=50_000)
    save_pretrained(init_model(tiny_config(moe=True), seed=3), tmp_path / "other")
    digest = weights_digest(tmp_path / "one")
    assert weights_digest(tmp_path / "again") == digest
    # Files, not tensors: the same weights sharded are other bytes, hence another digest.
    assert weights_digest(tmp_path / "sharded") not in (digest, weights_digest(tmp_path / "other"))
    assert weights_digest(tmp_path / "other") != digest
    with pytest.raises(CheckpointError):
        weights_digest(tmp_path / "missing")


def test_load_in_bfloat16(tmp_path):
    save_pretrained(init_model(tiny_config(moe=False)), tmp_path)
    model = load_pretrained(tmp_path, dtype=torch.bfloat16)
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    assert model(torch.tensor([[1, 2, 3]])).logits.dtype == torch.bfloat16


def test_bad_checkpoints_give_clear_errors(tmp_path):
    with pytest.raises(CheckpointError, match=r"no config\.json"):
        load_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(CheckpointError, match="unsupported model_type 'llama'"):
        load_pretrained(tmp_path)
    save_pretrained(init_model(tiny_config(moe=False)), tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match=r"model\.safetensors"):
        load_pretrained(tmp_path)
    # Weights that do not fit the config name the offending tensors.
    save_pretrained(init_model(tiny_config(moe=True)), tmp_path / "moe")
    config = json.loads((tmp_path / "moe" / "config.json").read_text())
    config["num_hidden_layers"] = 4
    (tmp_path / "moe" / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"missing \['model\.layers\.3"):
        load_pretrained(tmp_path / "moe")


def test_routed_experts_shape_and_dense_layers():
    model = init_model(tiny_config(moe=True), seed=3)
    assert model.config.moe_layers == [0, 2]  # layer 1 is forced dense
    out = model(torch.randint(0, 300, (2, 5)), return_routed_experts=True)
    assert out.routed_experts.shape == (2, 5, 2, 2)
    assert out.routed_experts.min() >= 0 and out.routed_experts.max() < 8
    # Dense model and no request: nothing returned.
    assert model(torch.tensor([[1]])).routed_experts is None


def test_logits_at_some_positions_are_those_rows_of_the_full_logits():
    model = init_model(tiny_config(moe=False), seed=5)
    ids = torch.randint(0, 300, (2, 7), generator=torch.Generator().manual_seed(2))
    at = torch.zeros(2, 7, dtype=torch.bool)
    at[0, 2:5] = at[1, 6] = True
    with torch.no_grad():
        full = model(ids).logits
        some = model(ids, logits_at=at).logits
    assert some.shape == (4, 300)
    assert torch.allclose(some, full[at], atol=1e-6)


def test_router_replay_reproduces_and_overrides_routing():
    model = init_model(tiny_config(moe=True), seed=4)
    ids = torch.randint(0, 300, (2, 9), generator=torch.Generator().manual_seed(1))
    natural = model(ids, return_routed_experts=True)
    # Replaying the experts the model chose itself changes nothing.
    replayed = model(ids, routed_experts=natural.routed_experts, return_routed_experts=True)
    assert torch.equal(replayed.routed_experts, natural.routed_experts)
    assert torch.allclose(replayed.logits, natural.logits, atol=1e-6)
    # Forcing other experts is obeyed and changes the output.
    forced = (natural.routed_experts + 1) % 8
    other = model(ids, routed_experts=forced, return_routed_experts=True)
    assert torch.equal(other.routed_experts, forced)
    assert (other.logits - natural.logits).abs().max() > 1e-3


def test_router_replay_gate_weights_come_from_current_router():
    model = init_model(tiny_config(moe=True), seed=5)
    ids = torch.randint(0, 300, (1, 6))
    routed = model(ids, return_routed_experts=True).routed_experts
    loss = model(ids, routed_experts=routed).logits.logsumexp(-1).sum()
    loss.backward()
    router = model.model.layers[0].mlp.gate.weight
    assert router.grad is not None and router.grad.abs().sum() > 0


def test_decode_attention_equals_the_fused_kernel():
    # One query per row against cached keys, grouped heads, rows of different lengths.
    g = torch.Generator().manual_seed(0)
    q = torch.randn(3, 4, 1, 16, generator=g)
    k, v = torch.randn(2, 3, 2, 9, 16, generator=g)
    lengths = torch.tensor([9, 4, 1])
    mask = (torch.arange(9)[None, :] < lengths[:, None])[:, None, None]  # [B, 1, 1, S]
    fused = torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, enable_gqa=True
    )
    assert torch.allclose(decode_attention(q, k, v, mask), fused, atol=1e-6)


def test_an_upcycled_model_computes_what_its_dense_source_does_then_trains_apart():
    dense = init_model(tiny_config(moe=False), seed=1)
    moe = upcycle(dense, experts=4, seed=0)
    assert moe.config.num_experts == 4 and moe.config.num_experts_per_tok == 2
    ids = torch.randint(0, 300, (2, 17), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = moe(ids, return_routed_experts=True)
        assert (out.logits - dense(ids).logits).abs().max().item() < 1e-5
    assert out.routed_experts.unique().numel() > 1  # the fresh router spreads the tokens
    weights = moe.state_dict()
    for e in range(4):
        assert torch.equal(
            weights[f"model.layers.0.mlp.experts.{e}.up_proj.weight"],
            dense.state_dict()["model.layers.0.mlp.up_proj.weight"],
        )
    # one step on a batch: the experts that saw different tokens are no longer copies
    moe(ids).logits.pow(2).mean().backward()
    grads = [moe.model.layers[0].mlp.experts[e].up_proj.weight.grad for e in range(4)]
    seen = [g for g in grads if g is not None and g.abs().sum() > 0]
    assert len(seen) >= 2 and not torch.allclose(seen[0], seen[1])
    with pytest.raises(ValueError, match="already a mixture"):
        upcycle(moe, experts=4)
