"""What fleetrl adds inside vLLM's worker process: loading a policy version in place.

vLLM imports this class by name (`worker_extension_cls`) into its worker; the engine side
(`fleetrl.inference.vllm_engine`) calls its methods with `collective_rpc`. Tensors travel
as one safetensors buffer, since tensors passed as RPC arguments arrive as lists.

On CPU, vLLM repacks each linear layer's weight for its GEMM kernels after loading and drops
the original, so an update carries every tensor: vLLM's in-place reload (`reload_weights`)
restores the checkpoint layout layer by layer, loads, and repacks. A tied `lm_head` shares
the embedding's tensor but keeps a packed copy of its own, which the reload does not
touch: it is repacked here.
"""

from __future__ import annotations

from safetensors.torch import load


class WeightLoader:
    """Mixed into vLLM's worker (`self` is the worker: `self.model_runner` is its)."""

    def fleetrl_load_weights(self, blob: bytes) -> int:
        """Load every tensor of `blob` (safetensors bytes, checkpoint names) into the
        running model; the number of tensors loaded."""
        tensors = load(blob)
        self.model_runner.reload_weights(weights_iterator=iter(tensors.items()))
        model = self.model_runner.get_model()
        head = getattr(model, "lm_head", None)
        if head is not None and head.weight is model.model.embed_tokens.weight:
            head.quant_method.process_weights_after_loading(head)
        return len(tensors)
