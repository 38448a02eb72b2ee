"""`fleetrl bench weights`: how small and how fast weight sync is under real RL steps.

Workload, per learning rate (default 1e-6 and 1e-5):
- a small Qwen3 (~3.4 M parameters) with float32 master weights and AdamW, trained on
  random token batches; after each step the served weights are the bf16 rounding of the
  masters, published to a WeightStore in a temporary folder;
- a bf16 Engine keeps `decode_batch` requests decoding while a WeightFollower fetches
  each version and swaps it in: the pause is compared with one decode step.

Per step it reports the fraction of bf16 elements unchanged, the delta bytes against the
full checkpoint (compression ratio) and against the entropy floor (codec.floor_bits), the
same for plain XOR + zstd (the baseline open systems ship), the codec's encode and decode
throughput per core, the hash throughput, and the engine pause; medians over the steps.

Then the codec alone on a synthetic ~1B-parameter bf16 state dict (size configurable),
built tensor by tensor so memory stays near one tensor's worth: masters ~ N(0, 0.02),
one Adam-sized step (lr x N(0, 1)) before rounding.

With `from_run` (a run directory, whose versions are in its `store` folder, or a store
URL), the codec also runs on that run's published versions, pair by pair (each version
against its delta base): delta bytes against the full version, the unchanged fraction,
encode and decode throughput, as stored and, for a run published in float32, as the same
versions rounded to bf16 would have been; medians over the pairs.

Throughput is bytes of bf16 weights per CPU second of the calling thread (time.thread_time):
the codec runs single-threaded, so this is "per core" whatever else the process does.
"Encode" and "decode" are the codec (XOR, positions, entropy coding); hashing (sha256 of
every tensor, needed to verify content) is reported on its own and in the end-to-end
publish/fetch figures.
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import zstandard
from rich.progress import Progress

from fleetrl.inference.engine import Engine
from fleetrl.model.checkpoint import init_model
from fleetrl.model.config import ModelConfig
from fleetrl.store import codec
from fleetrl.store.follower import WeightFollower
from fleetrl.store.manifest import Manifest
from fleetrl.store.rebuild import Buffer
from fleetrl.store.weights import Held, WeightStore, WeightStoreOptions
from fleetrl.types import SamplingParams


@dataclass
class WeightsBenchConfig:
    """Workload of the weight-sync benchmark."""

    steps: int = 8  # optimizer steps (published versions) per learning rate
    lrs: list[float] = field(default_factory=lambda: [1e-6, 1e-5])
    batch_size: int = 8  # training sequences per step
    seq_len: int = 64  # tokens per training sequence
    weight_decay: float = 0.01  # AdamW
    decode_batch: int = 8  # requests decoding while versions are swapped in
    threads: int = 2  # torch threads (training, engine); the codec is single-threaded
    zstd_level: int = 3  # for the xor/raw codecs and the plain XOR + zstd baseline
    synthetic_params: int = 1_000_000_000  # synthetic state dict size; 0 skips it
    synthetic_lr: float = 1e-6
    seed: int = 0
    from_run: str = ""  # a run directory or store URL whose versions to measure; "": none
    # The small model: Qwen3 layout, ~3.4 M parameters.
    vocab_size: int = 1024
    hidden_size: int = 256
    num_hidden_layers: int = 4


@dataclass
class _Totals:
    """Codec figures summed over one version's tensors."""

    elements: int = 0
    unchanged: int = 0
    full_bytes: int = 0
    delta_bytes: int = 0
    plain_bytes: int = 0
    floor_bits: float = 0.0
    encode_s: float = 0.0
    decode_s: float = 0.0
    hash_s: float = 0.0

    def add(self, new: np.ndarray, old: np.ndarray, options: codec.CodecOptions) -> None:
        """Measure one tensor (unsigned words of its weights); checks the round trip."""
        clock = time.thread_time()
        encoded = codec.encode(new, old, options)
        self.encode_s += time.thread_time() - clock
        out = old.copy()
        clock = time.thread_time()
        codec.apply(encoded.codec, encoded.payload, out)
        self.decode_s += time.thread_time() - clock
        if not np.array_equal(out, new):
            raise AssertionError("codec round trip is not bit-exact")
        clock = time.thread_time()
        hashlib.sha256(new).digest()
        self.hash_s += time.thread_time() - clock
        xor = np.bitwise_xor(new, old)
        self.elements += new.size
        self.unchanged += new.size - encoded.changed
        self.full_bytes += new.nbytes
        self.delta_bytes += len(encoded.payload)
        self.plain_bytes += codec.plain_xor_zstd_size(new, old, options.zstd_level)
        self.floor_bits += codec.floor_bits(xor)

    def figures(self) -> dict[str, float]:
        """Ratios and throughputs (JSON-ready)."""
        floor = self.floor_bits / 8
        delta = max(self.delta_bytes, 1)
        # CPU clocks tick in microseconds: a few tiny tensors can measure 0 s.
        encode_s, decode_s, hash_s = (
            max(t, 1e-9) for t in (self.encode_s, self.decode_s, self.hash_s)
        )
        return {
            "unchanged_fraction": self.unchanged / max(self.elements, 1),
            "full_bytes": self.full_bytes,
            "delta_bytes": self.delta_bytes,
            "floor_bytes": floor,
            "plain_bytes": self.plain_bytes,
            "compression_ratio": self.full_bytes / delta,
            "floor_ratio": self.delta_bytes / floor if floor else 1.0,
            "full_over_floor": self.full_bytes / floor if floor else float("inf"),
            "plain_compression_ratio": self.full_bytes / max(self.plain_bytes, 1),
            "plain_floor_ratio": self.plain_bytes / floor if floor else 1.0,
            "encode_s": self.encode_s,
            "decode_s": self.decode_s,
            "encode_gbps_per_core": self.full_bytes / encode_s / 1e9,
            "decode_gbps_per_core": self.full_bytes / decode_s / 1e9,
            "hash_gbps_per_core": self.full_bytes / hash_s / 1e9,
        }


def run_weights_bench(config: WeightsBenchConfig | None = None, progress: bool = True) -> dict:
    """Run every learning rate, then the synthetic state dict; return the figures (JSON-ready).

    Top-level headline keys are those of lr 1e-6 (or the first lr when 1e-6 is not run).
    """
    config = config or WeightsBenchConfig()
    torch.set_num_threads(config.threads)
    result: dict[str, Any] = {"config": asdict(config), "machine": _machine()}
    runs = []
    with Progress(disable=not progress, transient=True) as bar:
        for lr in config.lrs:
            runs.append(asyncio.run(_run_lr(config, lr, bar)))
        result["runs"] = runs
        if config.synthetic_params:
            result["synthetic"] = _run_synthetic(config, bar)
    if config.from_run:
        result["from_run"] = run_weights_bench_from_run(config.from_run, config.zstd_level)
    headline = next((r for r in runs if r["lr"] == 1e-6), runs[0] if runs else None)
    if headline is not None:
        result.update({"lr": headline["lr"], **headline["median"]})
    return result


def flat_figures(result: dict[str, Any]) -> dict[str, float | int | str]:
    """The headline figures of a run_weights_bench result as one flat table (for humans)."""
    keys = (
        "unchanged_fraction",
        "compression_ratio",
        "floor_ratio",
        "plain_compression_ratio",
        "plain_floor_ratio",
        "encode_gbps_per_core",
        "decode_gbps_per_core",
        "hash_gbps_per_core",
    )
    table: dict[str, float | int | str] = {}
    for run in result["runs"]:
        median = run["median"]
        table |= {f"lr {run['lr']:g}: {key}": median[key] for key in keys}
        table[f"lr {run['lr']:g}: pause_ms"] = 1e3 * median["pause_s"]
        table[f"lr {run['lr']:g}: decode_step_ms"] = 1e3 * median["decode_step_s"]
    if "synthetic" in result:
        synthetic = result["synthetic"]
        table["synthetic: parameters"] = synthetic["parameters"]
        table |= {f"synthetic: {key}": synthetic[key] for key in keys}
    if "from_run" in result:
        run = result["from_run"]
        table["run: versions measured"] = len(run["pairs"])
        table["run: dtype"] = run["dtype"]
        run_keys = ("unchanged_fraction", "compression_ratio", "stored_compression_ratio")
        run_keys += ("encode_gbps_per_core", "decode_gbps_per_core")
        table |= {f"run: {key} (p50)": run["median"][key] for key in run_keys if run["median"]}
        if run["median"].get("as_bfloat16"):
            as_bf16 = run["median"]["as_bfloat16"]
            for key in ("unchanged_fraction", "compression_ratio"):
                table[f"run as bf16: {key} (p50)"] = as_bf16[key]
    return table


def published_versions(store: WeightStore) -> list[int]:
    """The committed versions the store still holds, ascending: those with a manifest, up
    to LATEST (a newer manifest without it was never committed)."""
    latest = store.latest()
    return [v for v in store.versions() if latest is not None and v <= latest]


def run_weights_bench_from_run(source: str, zstd_level: int = 3) -> dict[str, Any]:
    """The codec on a real run's versions: for each version whose delta base is still in the
    store (garbage collection keeps the last few), the delta's bytes against the full version
    (as the run stored it, and re-encoded here with the round trip checked), the fraction of
    elements unchanged, encode and decode throughput; for a float32 run, also the same pair
    rounded to bf16. Medians over the pairs under "median" (JSON-ready).

    `source` is a run directory (its versions are in `source/store`) or a store URL.
    """
    local = Path(source) / "store"
    store = WeightStore(str(local) if local.is_dir() else source)
    versions = published_versions(store)
    options = codec.CodecOptions(zstd_level=zstd_level)
    pairs: list[dict[str, Any]] = []
    held: Held | None = None
    for version in versions:
        manifest = store.manifest(version)
        current = store.fetch(version, have=held)
        if held is not None and manifest.base == held.version:
            pairs.append(_measure_pair(held, current.tensors, manifest, options))
            pairs[-1] |= {"version": version, "base": manifest.base}
        held = Held(version, current.tensors)
    served = store.manifest(versions[-1]).tensors.values() if versions else []
    return {
        "store": store.url,
        "dtype": "/".join(sorted({entry.dtype for entry in served})),
        "pairs": pairs,
        "median": _medians(pairs),
    }


def _measure_pair(
    old: Held, new: dict[str, torch.Tensor], manifest: Manifest, options: codec.CodecOptions
) -> dict[str, Any]:
    """One version against its base, tensor by tensor (tied tensors once)."""
    totals, as_bf16 = _Totals(), _Totals()
    rounds = False
    for name, entry in manifest.tensors.items():
        before = old.tensors.get(name)
        after = new[name]
        if entry.alias is not None or before is None:
            continue  # stored once (tied), or new in this version
        if before.shape != after.shape or before.dtype != after.dtype:
            continue  # no comparable previous: the store ships it whole ("raw")
        totals.add(_words(after), _words(before), options)
        if after.is_floating_point() and after.dtype != torch.bfloat16:
            rounds = True
            as_bf16.add(
                _words(after.to(torch.bfloat16)), _words(before.to(torch.bfloat16)), options
            )
    stored = manifest.object_bytes("delta")
    figures: dict[str, Any] = {
        **totals.figures(),
        "stored_delta_bytes": stored,
        "stored_compression_ratio": totals.full_bytes / max(stored, 1),
        "manifest_bytes": len(manifest.to_json()),
    }
    if rounds:
        figures["as_bfloat16"] = as_bf16.figures()
    return figures


def _words(tensor: torch.Tensor) -> np.ndarray:
    """A tensor's bytes as unsigned words of its element size (what the codec encodes)."""
    return Buffer.view_of(tensor).words()


def _medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per key, the median over rows (nested dicts likewise); {} without rows."""
    if not rows:
        return {}
    out: dict[str, Any] = {}
    for key, value in rows[0].items():
        if isinstance(value, dict):
            out[key] = _medians([row[key] for row in rows])
        elif key not in ("version", "base"):
            out[key] = statistics.median(row[key] for row in rows)
    return out


def _model_config(config: WeightsBenchConfig) -> ModelConfig:
    return ModelConfig.small(config.vocab_size, config.hidden_size, config.num_hidden_layers)


def _model_words(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """The served bf16 weights of each parameter (tied ones once) as uint16 words."""
    return {
        name: p.detach().to(torch.bfloat16).view(torch.int16).numpy().view(np.uint16).ravel()
        for name, p in model.named_parameters()
    }


async def _run_lr(config: WeightsBenchConfig, lr: float, bar: Progress) -> dict[str, Any]:
    model_config = _model_config(config)
    torch.manual_seed(config.seed)
    master = init_model(model_config, seed=config.seed)
    optimizer = torch.optim.AdamW(master.parameters(), lr=lr, weight_decay=config.weight_decay)
    options = codec.CodecOptions(zstd_level=config.zstd_level)

    def served() -> dict[str, torch.Tensor]:
        return {k: v.to(torch.bfloat16) for k, v in master.state_dict().items()}

    task = bar.add_task(f"lr {lr:g}", total=config.steps)
    rows = []
    with tempfile.TemporaryDirectory() as root:
        store = WeightStore(root, WeightStoreOptions(full_every=10**9, codec=options))
        store.publish(0, served())
        engine_model = init_model(model_config, dtype=torch.bfloat16)
        engine_model.load_state_dict(served())
        engine = Engine(engine_model, max_batch_size=config.decode_batch, max_model_len=512)
        follower = WeightFollower(store, engine, name="bench", held=0)
        decode_step_s = await _decode_step_s(engine, config.decode_batch)
        stop = asyncio.Event()
        background = asyncio.create_task(_keep_decoding(engine, config.decode_batch, stop))
        previous = _model_words(master)
        for step in range(1, config.steps + 1):
            ids = torch.randint(0, config.vocab_size, (config.batch_size, config.seq_len + 1))
            logits = master(ids[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, config.vocab_size), ids[:, 1:].reshape(-1)
            )
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            current = _model_words(master)
            totals = _Totals()
            for name, new in current.items():
                totals.add(new, previous[name], options)
            published = store.publish(step, served())
            record = await follower.sync_once()
            assert record is not None
            full = published.elements * 2
            rows.append(
                {
                    "step": step,
                    **totals.figures(),
                    "manifest_bytes": published.manifest_bytes,
                    "publish_gbps_per_core": full / (published.hash_s + published.encode_s) / 1e9,
                    "sync_bytes": record.bytes,
                    "fetch_s": record.fetch_s,
                    "pause_s": record.pause_s,
                    "decode_step_s": decode_step_s,
                    "pause_over_decode_step": record.pause_s / decode_step_s,
                }
            )
            previous = current
            bar.advance(task)
        stop.set()
        await background
        await engine.close()
    median = {key: statistics.median(row[key] for row in rows) for key in rows[0] if key != "step"}
    return {"lr": lr, "steps": rows, "median": median}


async def _decode_step_s(engine: Engine, batch: int) -> float:
    """Seconds per decode step with `batch` requests running (after a warm-up)."""
    params = SamplingParams(max_tokens=48, seed=0)
    await asyncio.gather(*(engine.generate([1, 2, 3], params) for _ in range(batch)))
    steps, start = engine.stats.decode_steps, time.perf_counter()
    await asyncio.gather(*(engine.generate([1, 2, 3], params) for _ in range(batch)))
    return (time.perf_counter() - start) / (engine.stats.decode_steps - steps)


async def _keep_decoding(engine: Engine, batch: int, stop: asyncio.Event) -> None:
    """Keep `batch` requests in flight so every swap lands between two decode steps."""
    while not stop.is_set():
        params = SamplingParams(max_tokens=200)
        await asyncio.gather(*(engine.generate([4, 5, 6], params) for _ in range(batch)))


def _synthetic_shapes(params: int) -> list[tuple[str, tuple[int, int]]]:
    """Tensor shapes of a Qwen3-like dense model of about `params` parameters."""
    hidden = 2048 if params >= 200_000_000 else 256
    vocab = 16 * hidden
    layer = [
        ("q_proj", (hidden, hidden)),
        ("k_proj", (hidden // 4, hidden)),
        ("v_proj", (hidden // 4, hidden)),
        ("o_proj", (hidden, hidden)),
        ("gate_proj", (4 * hidden, hidden)),
        ("up_proj", (4 * hidden, hidden)),
        ("down_proj", (hidden, 4 * hidden)),
    ]
    per_layer = sum(a * b for _, (a, b) in layer)
    layers = max(1, round((params - vocab * hidden) / per_layer))
    shapes = [("embed_tokens", (vocab, hidden))]
    for i in range(layers):
        shapes += [(f"layers.{i}.{name}", shape) for name, shape in layer]
    return shapes


def _run_synthetic(config: WeightsBenchConfig, bar: Progress) -> dict[str, Any]:
    shapes = _synthetic_shapes(config.synthetic_params)
    generator = torch.Generator().manual_seed(config.seed)
    options = codec.CodecOptions(zstd_level=config.zstd_level)
    task = bar.add_task("synthetic", total=len(shapes))
    totals = _Totals()
    for _, shape in shapes:
        master = torch.randn(shape, generator=generator).mul_(0.02)
        old = master.to(torch.bfloat16)
        master.add_(torch.randn(shape, generator=generator).mul_(config.synthetic_lr))
        new = master.to(torch.bfloat16)
        del master
        as_words = [t.view(torch.int16).numpy().view(np.uint16).ravel() for t in (new, old)]
        totals.add(as_words[0], as_words[1], options)
        bar.advance(task)
    return {
        "parameters": totals.elements,
        "tensors": len(shapes),
        "lr": config.synthetic_lr,
        **totals.figures(),
    }


def _machine() -> dict[str, Any]:
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return {
        "date": datetime.date.today().isoformat(),
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "zstd": zstandard.ZSTD_VERSION,
    }
