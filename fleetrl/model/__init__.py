"""The policy network (Qwen3 dense and MoE), its checkpoints, tokenizer and chat template.

Import from the modules: `model.qwen3` (the network), `model.checkpoint` (HF load/save,
`resolve_checkpoint`), `model.tokenizer`, `model.chat`. This package imports nothing, so
that naming it does not load torch.
"""
