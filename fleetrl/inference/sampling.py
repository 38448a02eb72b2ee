"""Next-token sampling for a batch of requests that each bring their own SamplingParams.

The returned logprob of a sampled token is taken from the very distribution it was drawn
from (temperature, then top-k / top-p truncation and renormalisation), so that it is the
behaviour probability an importance ratio needs. Greedy rows (temperature 0) report the
temperature-1 logprob of the argmax token.
"""

from __future__ import annotations

import torch

from fleetrl.types import SamplingParams


def sampling_logprobs(logits: torch.Tensor, params: list[SamplingParams]) -> torch.Tensor:
    """Log-probabilities [B, V] of the distribution each row samples from (float32)."""
    logits = logits.float()
    temps = torch.tensor(
        [p.temperature if p.temperature > 0 else 1.0 for p in params], device=logits.device
    )
    scaled = logits / temps[:, None]
    top_ks = [p.top_k for p in params]
    top_ps = [p.top_p for p in params]
    if any(k > 0 for k in top_ks) or any(p < 1.0 for p in top_ps):
        scaled = _truncate(scaled, top_ks, top_ps)
    return torch.log_softmax(scaled, dim=-1)


def _truncate(scaled: torch.Tensor, top_ks: list[int], top_ps: list[float]) -> torch.Tensor:
    """Set logits outside each row's top-k and top-p nucleus to -inf."""
    vocab = scaled.shape[-1]
    sorted_logits, order = torch.sort(scaled, dim=-1, descending=True)
    rank = torch.arange(vocab, device=scaled.device)[None, :]
    ks = torch.tensor([k if k > 0 else vocab for k in top_ks], device=scaled.device)
    drop = rank >= ks[:, None]
    probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    mass_before = probs.cumsum(dim=-1) - probs
    ps = torch.tensor(top_ps, device=scaled.device)
    # Keep a token while the mass of the more likely tokens is below top_p (always >= 1 token).
    drop |= mass_before >= ps[:, None]
    drop_in_vocab_order = torch.zeros_like(drop).scatter(-1, order, drop)
    return scaled.masked_fill(drop_in_vocab_order, float("-inf"))


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator | None],
    shared: torch.Generator | None = None,
) -> tuple[list[int], list[float], list[dict[int, float]]]:
    """Sample one token per row of logits [B, V].

    Rows with a generator (a seeded request) draw from it alone, so their tokens do not
    depend on which other requests share the batch; other rows draw from `shared`.
    Returns token ids, their logprobs, and per row the requested top logprobs.
    """
    logprobs = sampling_logprobs(logits, params)
    # Inverse-CDF sampling: one uniform per row, from the row's own generator when it has
    # one, so a seeded request draws the same tokens whatever else shares the batch.
    uniform = torch.rand(len(params), generator=shared, device=logits.device)
    for i, gen in enumerate(generators):
        if gen is not None:
            uniform[i] = torch.rand(1, generator=gen, device=logits.device)[0]
    cdf = logprobs.exp().cumsum(dim=-1)
    # Scaled by the total and kept strictly below it, so float rounding can never select
    # a token of zero probability past the end of the support.
    total = cdf[:, -1]
    targets = torch.minimum(uniform * total, torch.nextafter(total, torch.zeros_like(total)))
    tokens = torch.searchsorted(cdf, targets[:, None], right=True).squeeze(1)
    greedy = [i for i, p in enumerate(params) if p.temperature == 0]
    if greedy:
        tokens[greedy] = logits[greedy].argmax(dim=-1)
    chosen = logprobs.gather(-1, tokens[:, None]).squeeze(1)
    top: list[dict[int, float]] = [{} for _ in params]
    n_top = max(p.top_logprobs for p in params)
    if n_top:
        values, ids = logprobs.topk(n_top, dim=-1)
        for i, p in enumerate(params):
            n = p.top_logprobs
            pairs = zip(ids[i, :n].tolist(), values[i, :n].tolist(), strict=True)
            top[i] = {t: v for t, v in pairs if v != float("-inf")}
    return tokens.tolist(), chosen.tolist(), top
