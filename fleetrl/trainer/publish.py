"""A policy version published from the trainer's shards: each rank encodes and uploads the
tensors it owns; no rank gathers the whole model.

    rank 0: plan (version, base, full snapshot or not) ─▶ broadcast
    every rank, tensor by tensor: round its shard to the served dtype, gather the shards
        to the tensor's owner (`owners`: the largest first, each to the least loaded rank)
    every owner: hash its tensors ─▶ all ranks swap their entries, and tied weights are
        linked over all of them, in state-dict order, as one process would
    every owner: encode its deltas (and snapshot) and upload them, in parallel
    rank 0: one manifest of every part's objects, then LATEST ─▶ broadcast the outcome
    every owner: its tensors become the base of its next delta

The manifest is the one a single process writes, but for the data objects' names (one set
per rank): a follower rebuilds and verifies the version exactly as before. One rank
publishes as `WeightStore.publish` does.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor, Shard

from fleetrl.store.errors import WeightStoreError
from fleetrl.store.manifest import TensorEntry
from fleetrl.store.weights import (
    PublishedPart,
    PublishPlan,
    PublishResult,
    WeightStore,
    link_aliases,
)
from fleetrl.trainer.parallel import Ranks, from_leader


def publish_version(
    weights: WeightStore, version: int, model: torch.nn.Module, ranks: Ranks
) -> PublishResult:
    """Publish `model`'s weights as `version` from every rank's shards (every rank calls
    it); every rank gets the leader's result. Raises WeightStoreError on every rank when
    the version cannot be published."""
    state = model.state_dict()
    if not ranks.distributed:
        return weights.publish(version, state)
    start = time.perf_counter()
    try:
        plan = from_leader(lambda: weights.plan(version), ranks)
        part = _write_own_part(weights, plan, model, state, ranks)
        parts: list | None = [None] * ranks.world if ranks.leader else None
        dist.gather_object(part, parts, dst=0)
        result = from_leader(lambda: _commit(weights, plan, parts, list(state), start), ranks)
    except BaseException:
        weights.forget()
        raise
    weights.accept(plan)
    return result


def _write_own_part(
    weights: WeightStore,
    plan: PublishPlan,
    model: torch.nn.Module,
    state: dict[str, torch.Tensor],
    ranks: Ranks,
) -> PublishedPart | WeightStoreError:
    """Gather, hash, encode and upload this rank's tensors; a WeightStoreError is returned,
    not raised, so that the ranks still meet and all of them raise it."""
    mine = _gathered(weights, model, state, ranks)
    try:
        entries, given, hash_s = weights.prepare(mine)
        everyone: list[dict[str, TensorEntry]] = [{} for _ in range(ranks.world)]
        dist.all_gather_object(everyone, entries)
        every_entry = {name: entry for part in everyone for name, entry in part.items()}
        link_aliases({name: every_entry[name] for name in state})
        for name, entry in entries.items():  # the gathered entries are copies of these
            entry.alias = every_entry[name].alias
        part = weights.write_part(plan, entries, given, part=f"r{ranks.rank}")
    except WeightStoreError as err:
        return err
    part.hash_s += hash_s
    return part


def owners(model: torch.nn.Module, ranks: Ranks) -> dict[str, int]:
    """The rank that publishes each tensor of `model`'s state dict: the largest first, each
    to the rank with the fewest bytes so far, the names of one parameter (tied weights) to
    one rank. Every rank computes the same."""
    groups = _tied_groups(model)
    state = model.state_dict()
    load = [0] * ranks.world
    owner: dict[str, int] = {}
    for group in sorted(groups.values(), key=lambda g: (-_nbytes(state[g[0]]), g[0])):
        rank = min(range(ranks.world), key=lambda r: (load[r], r))
        load[rank] += _nbytes(state[group[0]])
        owner.update(dict.fromkeys(group, rank))
    return owner


def _tied_groups(model: torch.nn.Module) -> dict[str, list[str]]:
    """The state dict's names, grouped by the tensor they name (first name → all names)."""
    first_name: dict[int, str] = {}
    group_of = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        group_of[name] = first_name.setdefault(id(parameter), name)
    groups: dict[str, list[str]] = {}
    for name in model.state_dict():
        groups.setdefault(group_of.get(name, name), []).append(name)
    return groups


def _gathered(
    weights: WeightStore, model: torch.nn.Module, state: dict[str, torch.Tensor], ranks: Ranks
) -> dict[str, torch.Tensor]:
    """The tensors this rank owns, whole and rounded to the served dtype (on CPU)."""
    owner = owners(model, ranks)
    mine = {}
    for first, names in _tied_groups(model).items():
        whole = _gather_to(weights.served(state[first]), owner[first], ranks)
        if whole is not None:
            mine.update(dict.fromkeys(names, whole))
    return {name: mine[name] for name in state if name in mine}  # in state-dict order


def _gather_to(tensor: torch.Tensor, owner: int, ranks: Ranks) -> torch.Tensor | None:
    """The whole of a parameter FSDP2 sharded by rows (`Shard(0)`), on rank `owner` (None
    on the others). Shards are padded to one size for the collective: the first ranks hold
    ceil(rows / N) rows each, the last ones fewer or none."""
    if not isinstance(tensor, DTensor) or tensor.placements != (Shard(0),):
        raise ValueError(f"expected a tensor FSDP2 sharded by rows, got {type(tensor).__name__}")
    local = tensor.to_local()
    rows = tensor.shape[0]
    padded = local.new_zeros((-(-rows // ranks.world), *tensor.shape[1:]))
    padded[: local.shape[0]] = local
    pieces = [torch.empty_like(padded) for _ in range(ranks.world)] if owner == ranks.rank else None
    dist.gather(padded, pieces, dst=owner)
    return None if pieces is None else torch.cat(pieces)[:rows].cpu()


def _commit(
    weights: WeightStore,
    plan: PublishPlan,
    parts: list[PublishedPart | WeightStoreError] | None,
    order: list[str],
    start: float,
) -> PublishResult:
    """On rank 0: the parts committed as one version, or the first part's error."""
    assert parts is not None
    written = []
    for part in parts:
        if isinstance(part, WeightStoreError):
            raise part
        written.append(part)
    return weights.commit(plan, written, order, start)


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()
