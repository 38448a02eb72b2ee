"""KVCache: preallocated key/value memory for batched incremental decoding.

The cache holds `max_batch` slots, each able to hold `max_len` positions. The engine keeps
its running requests packed in slots 0..B-1, so a decode step reads the cache through
plain views (`k[layer, :B, :, :max_len]`) and never gathers or copies it.

Before each forward the engine calls `begin(rows, starts, new_len)`: the batch rows map
to slots `rows`, row b's new tokens take positions `starts[b] .. starts[b] + new_len - 1`.
Every attention layer then calls `update(layer, k, v)`, which writes the new keys and
values and returns the keys/values visible to the batch plus the attention mask.

    engine ──begin(rows, starts)──▶ KVCache ◀──update(layer, k, v)── each attention layer

Slot contents past a row's length are stale data from earlier requests; the mask hides
them. Prefix sharing copies a slot's first positions into another (`copy`). Not covered:
paging (a slot is owned by one request and holds `max_len` positions).
"""

from __future__ import annotations

import torch


class KVCache:
    """Per-layer key/value tensors of shape [max_batch, kv_heads, max_len, head_dim]."""

    def __init__(
        self,
        num_layers: int,
        max_batch: int,
        kv_heads: int,
        max_len: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (num_layers, max_batch, kv_heads, max_len, head_dim)
        # Zeros, not empty: masked-out values still enter the attention matmul as 0 * v.
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.max_batch = max_batch
        self.max_len = max_len
        self.rows = slice(0, 0)
        self.starts = torch.zeros(0, dtype=torch.long)
        self.positions = torch.zeros(0, 0, dtype=torch.long)
        self.mask = torch.zeros(0, 1, 0, 0, dtype=torch.bool)
        self.visible = 0

    def begin(self, rows: slice, starts: torch.Tensor, new_len: int) -> None:
        """Prepare a forward of `new_len` new tokens for each slot in `rows`.

        starts: [B] long, the number of positions each row already holds.
        """
        self.rows = rows
        self.starts = starts
        device = self.k.device
        offsets = torch.arange(new_len, device=device)
        self.positions = starts[:, None] + offsets[None, :]  # [B, new_len]
        self.visible = int(starts.max()) + new_len
        if self.visible > self.max_len:
            raise ValueError(f"sequence of {self.visible} positions exceeds cache {self.max_len}")
        keys = torch.arange(self.visible, device=device)
        # Row b, query i (at position starts[b] + i) sees keys 0 .. starts[b] + i.
        self.mask = (keys[None, None, :] <= self.positions[:, :, None])[:, None]  # [B,1,T,S]

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Store new keys/values [B, kv_heads, T, D]; return visible keys, values and mask."""
        kc, vc = self.k[layer, self.rows], self.v[layer, self.rows]
        new_len = k.shape[2]
        if new_len == 1:
            batch = torch.arange(k.shape[0], device=k.device)
            kc[batch, :, self.starts] = k[:, :, 0]
            vc[batch, :, self.starts] = v[:, :, 0]
        else:
            for b, start in enumerate(self.starts.tolist()):
                kc[b, :, start : start + new_len] = k[b]
                vc[b, :, start : start + new_len] = v[b]
        return kc[:, :, : self.visible], vc[:, :, : self.visible], self.mask

    def copy(self, src: int, dst: int, length: int) -> None:
        """Copy the first `length` positions of slot `src` into slot `dst` (prefix reuse,
        parking, and packing the running requests to the front)."""
        self.k[:, dst, :, :length] = self.k[:, src, :, :length]
        self.v[:, dst, :, :length] = self.v[:, src, :, :length]
