"""ModelConfig: the hyper-parameters of a Qwen3 (dense) or Qwen3-MoE policy network.

Field names follow Hugging Face's `config.json` so a real checkpoint's config maps onto it
one to one. `from_hf` accepts both the transformers 4.x (`rope_theta`) and 5.x
(`rope_parameters`) spellings; `to_hf` writes both so either version loads our checkpoints.
Not covered: sliding-window attention and scaled RoPE variants (YaRN, linear, dynamic);
configs asking for them are refused with a clear error rather than silently mis-run.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

SUPPORTED_MODEL_TYPES = ("qwen3", "qwen3_moe")


@dataclass
class ModelConfig:
    """Architecture of a Qwen3-family decoder. MoE when `num_experts > 0`."""

    vocab_size: int = 1024
    hidden_size: int = 128
    intermediate_size: int = 384  # SwiGLU width of dense MLP layers
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2  # grouped-query attention: heads share K/V in groups
    head_dim: int = 32
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = True
    attention_bias: bool = False
    initializer_range: float = 0.02
    # Mixture of experts (Qwen3-MoE); ignored when num_experts == 0.
    num_experts: int = 0
    num_experts_per_tok: int = 2  # top-k experts per token
    moe_intermediate_size: int = 128  # SwiGLU width of each expert
    norm_topk_prob: bool = True  # renormalise the top-k gate weights to sum to 1
    decoder_sparse_step: int = 1  # every n-th layer is MoE
    mlp_only_layers: list[int] = field(default_factory=list)  # layers forced dense
    # Token ids the chat template relies on (written to config.json for HF tools).
    bos_token_id: int | None = None
    eos_token_id: int | None = None

    @classmethod
    def small(
        cls, vocab_size: int, hidden_size: int, num_hidden_layers: int, heads: int = 4, **kw: Any
    ) -> ModelConfig:
        """The shape fleetrl uses for its own small models (base model, benchmarks): SwiGLU
        width 3 x hidden, `heads` query heads sharing K/V in pairs, head_dim hidden/heads."""
        shape = {
            "vocab_size": vocab_size,
            "hidden_size": hidden_size,
            "intermediate_size": 3 * hidden_size,
            "num_hidden_layers": num_hidden_layers,
            "num_attention_heads": heads,
            "num_key_value_heads": max(1, heads // 2),
            "head_dim": hidden_size // heads,
        }
        return cls(**(shape | kw))

    @property
    def is_moe(self) -> bool:
        """True for the Qwen3-MoE variant."""
        return self.num_experts > 0

    @property
    def model_type(self) -> str:
        """Hugging Face `model_type` string."""
        return "qwen3_moe" if self.is_moe else "qwen3"

    def is_moe_layer(self, layer: int) -> bool:
        """Whether decoder layer `layer` uses the sparse MoE block (Qwen3-MoE's rule)."""
        return (
            self.is_moe
            and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0
        )

    @property
    def moe_layers(self) -> list[int]:
        """Indices of the MoE layers, in order; routed-expert tensors index these."""
        return [i for i in range(self.num_hidden_layers) if self.is_moe_layer(i)]

    def validate(self) -> None:
        """Raise ValueError naming the field when the shapes do not fit together."""
        sizes = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
        }
        if self.is_moe:
            sizes["moe_intermediate_size"] = self.moe_intermediate_size
            sizes["decoder_sparse_step"] = self.decoder_sparse_step
        for name, value in sizes.items():
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if self.num_experts < 0:
            raise ValueError(f"num_experts must be >= 0 (0: dense), got {self.num_experts}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.is_moe and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok must be in [1, num_experts={self.num_experts}], "
                f"got {self.num_experts_per_tok}"
            )

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> ModelConfig:
        """Build from a Hugging Face config.json dict; unsupported variants raise ValueError."""
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ValueError(
                f"unsupported model_type {model_type!r}: fleetrl runs {SUPPORTED_MODEL_TYPES}"
            )
        if hf.get("use_sliding_window"):
            raise ValueError("use_sliding_window=true is not supported")
        rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type != "default":
            raise ValueError(f"rope type {rope_type!r} is not supported, only 'default'")
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in hf.items() if k in known and v is not None}
        if "num_experts" not in values and "num_local_experts" in hf:  # transformers 5 spelling
            values["num_experts"] = hf["num_local_experts"]
        if "rope_theta" not in values and "rope_theta" in rope:
            values["rope_theta"] = rope["rope_theta"]
        if "head_dim" not in values:
            if hf["num_attention_heads"] < 1:
                raise ValueError(
                    f"num_attention_heads must be >= 1, got {hf['num_attention_heads']}"
                )
            values["head_dim"] = hf["hidden_size"] // hf["num_attention_heads"]
        if model_type == "qwen3":
            values["num_experts"] = 0
        eos = values.get("eos_token_id")
        if isinstance(eos, list):
            values["eos_token_id"] = eos[0] if eos else None
        config = cls(**values)
        config.validate()
        return config

    def to_hf(self, dtype: str = "float32") -> dict[str, Any]:
        """The config.json dict that transformers' Qwen3 / Qwen3-MoE classes load."""
        hf = asdict(self)
        hf["model_type"] = self.model_type
        hf["architectures"] = [
            "Qwen3MoeForCausalLM" if self.is_moe else "Qwen3ForCausalLM",
        ]
        hf["hidden_act"] = "silu"
        hf["dtype"] = dtype
        hf["torch_dtype"] = dtype
        hf["use_sliding_window"] = False
        hf["attention_dropout"] = 0.0
        hf["rope_parameters"] = {"rope_type": "default", "rope_theta": self.rope_theta}
        if not self.is_moe:
            for key in (
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "norm_topk_prob",
                "decoder_sparse_step",
                "mlp_only_layers",
            ):
                del hf[key]
        else:
            hf["router_aux_loss_coef"] = 0.0
            hf["output_router_logits"] = False
        return hf
