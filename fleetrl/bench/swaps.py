"""Serving latency while the served version swaps (`fleetrl bench realtime`'s latency
phases): short chat requests with no swap, then as many while a toggler makes the store
serve two versions in turn, so that the server swaps weights between decode steps under
load. The figures: p50/p99 of each phase, their p99 ratio, failed requests and the
versions that answered (`mixed`: a reply two versions sampled)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np

from fleetrl.rollout.users import sampled_versions
from fleetrl.store.objectstore import ObjectStore
from fleetrl.store.serving import serve_version, served_version
from fleetrl.store.weights import WeightStore

LATENCY_PROMPTS = ("Say hello.", "Name a prime number.", "What is 2 + 3?", "Spell cat.")
LATENCY_MAX_TOKENS = 16
LATENCY_CONCURRENCY = 4
LATENCY_GAP_S = 0.25  # between the starts of two requests of a latency phase
SWAP_EVERY_S = 1.0
REQUEST_TIMEOUT_S = 120.0
HOLD_TIMEOUT_S = 120.0  # for the server to take the served version before the calm phase


@dataclass
class _Answer:
    """One latency request as its client saw it."""

    latency_s: float
    ok: bool  # answered 200
    versions: set[int]  # the versions that sampled its reply


async def swap_latency(url: str, store: ObjectStore, last: int, requests: int) -> dict[str, Any]:
    """The latency figures: `requests` chat requests with no swap, then as many while the
    served version toggles between 0 and `last` (or the newest version when the run served
    only 0); the served version is `last` again afterwards."""
    other, note = last, None
    if last == 0:
        other = WeightStore(store).latest() or 0
        note = f"only version 0 was served: toggled between 0 and the newest, {other}"
    async with httpx.AsyncClient(base_url=url, timeout=REQUEST_TIMEOUT_S) as http:
        await _holding(http, last)
        await _ask(http, 0)  # a warm-up, not counted
        calm = await _load(http, requests)
        stop = asyncio.Event()
        toggler = asyncio.create_task(_toggle(store, (0, other), stop))
        swapping = await _load(http, requests)
        stop.set()
        toggles = await toggler
    if served_version(store) != last:
        serve_version(store, last, "rollback")
    none, swaps = _phase(calm), _phase(swapping)
    ratio = None
    if none["p99_s"] and swaps["p99_s"] is not None:
        ratio = swaps["p99_s"] / none["p99_s"]
    return {
        "no_swaps": none,
        "swaps": swaps | {"toggles": toggles},
        "p99_ratio": ratio,
        "toggled_between": [0, other],
        "note": note,
        "concurrency": LATENCY_CONCURRENCY,
        "gap_s": LATENCY_GAP_S,
        "swap_every_s": SWAP_EVERY_S,
        "max_tokens": LATENCY_MAX_TOKENS,
    }


async def _holding(http: httpx.AsyncClient, version: int) -> None:
    """Return once the server holds `version`: its follower polls the store, so a version
    served a moment ago may still be on its way (the calm phase must not see a swap)."""
    deadline = time.monotonic() + HOLD_TIMEOUT_S
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            response = await http.get("/health")
            if response.status_code == 200 and response.json().get("version") == version:
                return
        await asyncio.sleep(0.2)
    raise TimeoutError(f"did not take the served version {version} in {HOLD_TIMEOUT_S:.0f} s")


async def _toggle(store: ObjectStore, pair: tuple[int, int], stop: asyncio.Event) -> int:
    """Serve pair[0], pair[1], pair[0], … every SWAP_EVERY_S until `stop`; how many times."""
    toggles = 0
    while not stop.is_set():
        await asyncio.to_thread(serve_version, store, pair[toggles % 2], "rollback")
        toggles += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SWAP_EVERY_S)
    return toggles


async def _load(http: httpx.AsyncClient, requests: int) -> list[_Answer]:
    """`requests` chat requests, one started every LATENCY_GAP_S, at most
    LATENCY_CONCURRENCY at once (a later one waits, untimed, for a slot)."""
    slots = asyncio.Semaphore(LATENCY_CONCURRENCY)

    async def one(i: int) -> _Answer:
        await asyncio.sleep(i * LATENCY_GAP_S)
        async with slots:
            return await _ask(http, i)

    return list(await asyncio.gather(*(one(i) for i in range(requests))))


async def _ask(http: httpx.AsyncClient, i: int) -> _Answer:
    """One short greedy chat request (prompt i of LATENCY_PROMPTS, cycling), timed."""
    body = {
        "messages": [{"role": "user", "content": LATENCY_PROMPTS[i % len(LATENCY_PROMPTS)]}],
        "max_tokens": LATENCY_MAX_TOKENS,
        "temperature": 0.0,
    }
    start = time.monotonic()
    try:
        response = await http.post("/v1/chat/completions", json=body)
    except httpx.HTTPError:
        return _Answer(time.monotonic() - start, False, set())
    latency = time.monotonic() - start
    if response.status_code != 200:
        return _Answer(latency, False, set())
    return _Answer(latency, True, sampled_versions(response.content))


def _phase(answers: list[_Answer]) -> dict[str, Any]:
    """p50/p99 of the answered requests, failed ones, and the versions that answered
    (`mixed`: replies sampled by two versions, a swap in flight)."""
    times = [a.latency_s for a in answers if a.ok]
    return {
        "requests": len(answers),
        "failed": sum(not a.ok for a in answers),
        "p50_s": float(np.percentile(times, 50)) if times else None,
        "p99_s": float(np.percentile(times, 99)) if times else None,
        "versions_seen": sorted(set().union(*(a.versions for a in answers))),
        "mixed": sum(len(a.versions) > 1 for a in answers),
    }
