"""The run report: one self-contained `report.html` with a summary table and plots.

Role: `write_report(run_dir)` reads `run_dir/metrics.jsonl` (see `fleetrl.observe.metrics`),
`run_dir/config.toml` (shown verbatim) and `run_dir/eval.json` if present, and writes
`run_dir/report.html`; given the regions' own metrics (read from the run's store by the
caller, `fleetrl.store.region_metrics`, so regions that ran elsewhere show too), a table
per region. The page has no external assets: plots are inline base64 PNGs drawn
by matplotlib (object API, Agg renderer; the global pyplot backend is not touched).

Contract: the metric keys read, by record kind (`SECTIONS` below is the source of truth; every
key is a field of the kind's record in `fleetrl.observe.records`, checked on import):

    train    reward, pass_rate                                  (a) reward and pass rate
             staleness_hist (counts for staleness 0, 1, 2, …), staleness_mean      (b)
             mismatch_kl_k3, mismatch_abs_logprob, correction_truncated_frac,
             clip_frac                                          (d) train/inference mismatch
             samples_per_s, tokens_per_s, trainer_idle_frac,
             wait_s, forward_backward_s, publish_s              (e) throughput and time split
             loss, grad_norm, entropy, output_scale             optimisation
    eval     pass_at_1, ci_low, ci_high (step = train step evaluated at; on plot (a))
    sync     sync_bytes, full_bytes, unchanged_frac, sync_pause_ms (step = version)  (c)

`eval.json`, if present, maps a label to a summary object, e.g.
`{"base": {"pass_at_1": 0.31, "ci_low": 0.25, "ci_high": 0.37, "n": 200}, "final": {…}}`;
the summary table compares "base" with "final" (falling back to the first and last "eval"
records), and every entry is listed in its own table.

Any key, kind or file may be missing: a panel without data says "not logged", a section
without any data shows no image. If a process resumed from an earlier checkpoint, its
records of the replayed steps supersede the earlier ones (a step going backwards within a
kind drops that kind's records from that step on).

Not covered: interactive plots, comparing several runs, live refresh.
"""

from __future__ import annotations

import base64
import datetime
import html
import io
import json
import math
import time
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any, Literal

from fleetrl.observe.metrics import read_metrics
from fleetrl.observe.records import RECORDS, EvalRecord, Record, SyncRecord, TrainRecord

Records = dict[str, list[dict[str, Any]]]  # kind → its records, in step order

_FINAL_WINDOW = 10  # "final" train numbers are the mean of this many last steps (one is noise)
_SMOOTH_ABOVE = 50  # series longer than this get a moving average over the faint raw line
_MAX_STALENESS_BANDS = 8  # staleness >= 7 shares the last band; more colours are unreadable


def series(record: type[Record], key: str) -> str:
    """The series name "kind.key" of a record's field. Raises `ValueError` if the record has
    no such field: a panel naming a key that nothing logs fails when this module loads."""
    if key not in {f.name for f in fields(record)}:
        raise ValueError(f"{record.__name__} has no field {key!r}: nothing logs it")
    return f"{record.kind}.{key}"


_train = partial(series, TrainRecord)
_sync = partial(series, SyncRecord)
_eval = partial(series, EvalRecord)


@dataclass(frozen=True)
class Panel:
    """One subplot: series named "kind.key", drawn as lines or stacked areas."""

    title: str
    series: tuple[str, ...]
    ylabel: str = ""
    # line (smoothed when long) | points (first series as dots, not smoothed: spikes such as
    # full snapshots matter; the others as reference lines beneath) | stack (the keys
    # stacked) | hist (one list key's entries as shares, stacked)
    style: Literal["line", "points", "stack", "hist"] = "line"
    log_bytes: bool = False  # y axis on a log scale, labelled in kB/MB/GB


@dataclass(frozen=True)
class Section:
    """One section of the page: a title, a figure of panels, and the sentence under it."""

    anchor: str
    title: str
    caption: str
    panels: tuple[Panel, ...]


SECTIONS = (
    Section(
        "reward",
        "Reward and pass rate",
        "Mean reward and pass rate of the samples trained on at each step; dots are held-out "
        "evaluations with their confidence intervals.",
        (
            Panel("reward", (_train("reward"),), "mean reward"),
            Panel("pass rate", (_train("pass_rate"), _eval("pass_at_1")), "fraction passed"),
        ),
    ),
    Section(
        "staleness",
        "Staleness",
        "How many policy versions behind the trainer the trained samples were: the share of "
        "each staleness per step, and the mean.",
        (
            Panel(
                "share by staleness", (_train("staleness_hist"),), "share of samples", style="hist"
            ),
            Panel("mean staleness", (_train("staleness_mean"),), "versions"),
        ),
    ),
    Section(
        "sync",
        "Weight sync",
        "Bytes published per policy version (delta as sent vs a full version in the served "
        "dtype, log scale), the fraction of elements bit-identical to the previous version, "
        "and how long inference paused to apply it.",
        (
            Panel(
                "bytes per version",
                (_sync("sync_bytes"), _sync("full_bytes")),
                style="points",
                log_bytes=True,
            ),
            Panel("unchanged elements", (_sync("unchanged_frac"),), "fraction"),
            Panel("engine pause", (_sync("sync_pause_ms"),), "ms"),
        ),
    ),
    Section(
        "mismatch",
        "Train/inference mismatch",
        "How far the sampling engine's token probabilities are from the trainer's, and how "
        "often the loss truncated the correction weight or clipped the ratio.",
        (
            Panel("KL(engine ‖ trainer), k3 estimate", (_train("mismatch_kl_k3"),), "nats/token"),
            Panel("mean |Δ logprob|", (_train("mismatch_abs_logprob"),), "nats/token"),
            Panel("correction truncated", (_train("correction_truncated_frac"),), "fraction"),
            Panel("ratio clipped", (_train("clip_frac"),), "fraction"),
        ),
    ),
    Section(
        "throughput",
        "Throughput",
        "Samples and tokens trained per second, the fraction of time the trainer sat idle "
        "waiting for data, and where each step's time went.",
        (
            Panel("samples/s", (_train("samples_per_s"),), "samples/s"),
            Panel("tokens/s", (_train("tokens_per_s"),), "tokens/s"),
            Panel("trainer idle", (_train("trainer_idle_frac"),), "fraction"),
            Panel(
                "time per step",
                (_train("wait_s"), _train("forward_backward_s"), _train("publish_s")),
                "s",
                style="stack",
            ),
        ),
    ),
    Section(
        "optimisation",
        "Optimisation",
        "Policy loss, gradient norm before clipping, mean entropy of the sampled tokens, and "
        "the final norm's mean gain (the output logits' scale: rising means sharpening).",
        (
            Panel("loss", (_train("loss"),)),
            Panel("gradient norm", (_train("grad_norm"),)),
            Panel("entropy", (_train("entropy"),), "nats/token"),
            Panel("output scale", (_train("output_scale"),)),
        ),
    ),
)


def write_report(run_dir: Path, regions: dict[str, list[dict[str, Any]]] | None = None) -> Path:
    """Write `run_dir/report.html` from the run's metrics, config and evals, and the
    regions' own records if given (region -> records of kinds "applied", "relayed",
    "group"); return its path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"run directory {run_dir} does not exist")
    metrics_path = run_dir / "metrics.jsonl"
    raw = read_metrics(metrics_path) if metrics_path.exists() else []
    records = _by_kind(raw)
    evals, eval_error = _read_evals(run_dir / "eval.json")
    config_path = run_dir / "config.toml"
    config = config_path.read_text(encoding="utf-8") if config_path.exists() else None

    body = [
        f"<h1>fleetrl run report: {_esc(run_dir.name)}</h1>",
        f"<p class='sub'>{len(raw)} records from {_esc(str(metrics_path))}, generated "
        f"{_utc(time.time())}. In plots of more than "
        f"{_SMOOTH_ABOVE} points the faint line is per step and the bold one a moving "
        "average.</p>",
        _summary_table(run_dir.name, raw, records, evals),
        "<nav>"
        + " · ".join(f"<a href='#{s.anchor}'>{_esc(s.title)}</a>" for s in SECTIONS)
        + " · <a href='#regions'>Regions</a> · <a href='#evals'>Evaluations</a>"
        " · <a href='#config'>Configuration</a> · <a href='#logged'>Metrics logged</a></nav>",
    ]
    body += [_section_html(section, records) for section in SECTIONS]
    body.append(_regions_html(regions or {}))
    body.append(_evals_html(evals, eval_error))
    body.append(_config_html(config))
    body.append(_logged_html(records))
    out = run_dir / "report.html"
    out.write_text(_PAGE.format(title=_esc(run_dir.name), body="\n".join(body)), encoding="utf-8")
    return out


def _by_kind(raw: list[dict[str, Any]]) -> Records:
    """Group records by kind; a step going backwards replaces that kind's later records."""
    records: Records = {}
    for record in raw:
        kept = records.setdefault(str(record.get("kind", "")), [])
        step = record.get("step", 0)
        if kept and step < kept[-1].get("step", 0):
            # A resumed process replays steps after its checkpoint; the replay is what counts.
            while kept and kept[-1].get("step", 0) >= step:
                kept.pop()
        kept.append(record)
    return records


def _numeric(records: Records, name: str) -> tuple[list[int], list[float]]:
    """(steps, values) of the "kind.key" series where the value is a finite number."""
    kind, key = name.split(".", 1)
    rows = [(r["step"], float(r[key])) for r in records.get(kind, []) if _is_number(r.get(key))]
    return [step for step, _ in rows], [value for _, value in rows]


def _logged(records: Records, name: str) -> bool:
    """Whether any record of the series' kind has its key."""
    kind, key = name.split(".", 1)
    return any(r.get(key) is not None for r in records.get(kind, []))


def _is_number(value: Any) -> bool:
    """A finite int or float (bools, strings, lists, NaN and infinities are not plotted)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


# ---- summary -------------------------------------------------------------------------------


def _summary_table(
    name: str, raw: list[dict[str, Any]], records: Records, evals: dict[str, Any]
) -> str:
    """The table at the top of the page: the run's headline numbers."""
    missing = "<span class='missing'>not logged</span>"
    times = [r["time"] for r in raw if _is_number(r.get("time"))]
    walls = [r["wall"] for r in raw if _is_number(r.get("wall"))]
    train = records.get(TrainRecord.kind, [])
    rows = [
        ("run", _esc(name)),
        ("started", _utc(min(walls)) if walls else missing),
        ("duration", _duration(max(times)) if times else missing),
        ("train steps", f"{train[-1]['step']} ({len(train)} logged)" if train else missing),
    ]
    finals = (("final reward", _train("reward")), ("final pass rate", _train("pass_rate")))
    for label, name in finals:
        values = _numeric(records, name)[1][-_FINAL_WINDOW:]
        if values:
            rows.append((label, f"{_mean(values):.3f} (mean of last {len(values)} steps)"))
        else:
            rows.append((label, missing))
    rows.append(("held-out pass@1", _base_vs_final(records, evals) or missing))
    rows.append(("weight sync", _sync_summary(records) or missing))
    speeds = []
    for key, unit in (("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s")):
        values = _numeric(records, _train(key))[1]
        if values:
            speeds.append(f"{_mean(values):,.1f} {unit}")
    rows.append(("mean throughput", ", ".join(speeds) or missing))
    cells = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<table class='summary'>{cells}</table>"


def _base_vs_final(records: Records, evals: dict[str, Any]) -> str | None:
    """'base X [lo, hi] → final Y [lo, hi] (Δ)' from eval.json, else from the eval records."""
    if isinstance(evals.get("base"), dict) and isinstance(evals.get("final"), dict):
        pairs = [("base", evals["base"]), ("final", evals["final"])]
    else:
        points = [r for r in records.get(EvalRecord.kind, []) if _is_number(r.get("pass_at_1"))]
        if not points:
            return None
        ends = [points[0], points[-1]] if len(points) > 1 else [points[0]]
        pairs = [(f"step {r['step']}", r) for r in ends]
    text = " → ".join(f"{_esc(label)}: {_pass_at_1(s)}" for label, s in pairs)
    first, last = (s.get("pass_at_1") for _, s in (pairs[0], pairs[-1]))
    if len(pairs) == 2 and _is_number(first) and _is_number(last):
        text += f" (Δ {last - first:+.3f})"
    return text


def _pass_at_1(summary: dict[str, Any]) -> str:
    """'0.312 [0.250, 0.371], n=200' with whatever of those fields the summary has."""
    value = summary.get("pass_at_1")
    text = f"{value:.3f}" if _is_number(value) else "?"
    low, high = summary.get("ci_low"), summary.get("ci_high")
    if _is_number(low) and _is_number(high):
        text += f" [{low:.3f}, {high:.3f}]"
    if "n" in summary:
        text += f", n={_esc(str(summary['n']))}"
    return text


def _sync_summary(records: Records) -> str | None:
    """Total bytes sent, compared with full snapshots, and the mean engine pause."""
    sent = _numeric(records, _sync("sync_bytes"))[1]
    if not sent:
        return None
    text = f"{_human_bytes(sum(sent))} over {len(sent)} version{'s' * (len(sent) != 1)}"
    full = _numeric(records, _sync("full_bytes"))[1]
    if full and sum(sent) > 0:
        text += f" (full snapshots: {_human_bytes(sum(full))}, {sum(full) / sum(sent):.1f}x more)"
    pauses = _numeric(records, _sync("sync_pause_ms"))[1]
    if pauses:
        text += f"; mean pause {_mean(pauses):.1f} ms"
    return text


# ---- plots ---------------------------------------------------------------------------------


def _section_html(section: Section, records: Records) -> str:
    """A section: its title, then the figure and caption, or a 'not logged' note."""
    head = f"<section id='{section.anchor}'><h2>{_esc(section.title)}</h2>"
    names = [name for panel in section.panels for name in panel.series]
    if not any(_logged(records, name) for name in names):
        keys = ", ".join(names)
        return f"{head}<p class='missing'>not logged ({_esc(keys)})</p></section>"
    png = _figure_png(section.panels, records)
    image = f"<img alt='{_esc(section.title)}' src='data:image/png;base64,{png}'>"
    caption = f"<figcaption>{_esc(section.caption)}</figcaption>"
    return f"{head}<figure>{image}{caption}</figure></section>"


def _figure_png(panels: tuple[Panel, ...], records: Records) -> str:
    """Draw the panels two per row; return the PNG as base64 text."""
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter
    except ImportError as err:
        raise ImportError("the run report needs matplotlib: pip install matplotlib") from err

    cols = min(2, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(5.5 * cols, 3.1 * rows), dpi=100, layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).flatten()
    for ax, panel in zip(axes, panels, strict=False):
        ax.set_title(panel.title, fontsize=11)
        drawn = _draw_panel(ax, panel, records)
        if not drawn:
            note = "not logged\n(" + "\n".join(panel.series) + ")"
            ax.text(0.5, 0.5, note, ha="center", va="center", color="0.4", transform=ax.transAxes)
            ax.set_xticks([])
            ax.set_yticks([])
            continue
        kind = panel.series[0].split(".", 1)[0]
        ax.set_xlabel(RECORDS[kind].step_axis)
        ax.set_ylabel(panel.ylabel)
        # Steps and versions are whole numbers: no 2.95, 3.00, 3.05 ticks around one point.
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        ax.grid(alpha=0.3)
        if panel.log_bytes:
            ax.set_yscale("log")
            # Ticks at 1, 2, 5 x 10^k labelled in kB/MB/GB; log minor labels would be 2x10^6.
            ax.yaxis.set_major_locator(LogLocator(subs=(1, 2, 5)))
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: _human_bytes(y)))
            ax.yaxis.set_minor_formatter(NullFormatter())
        if ax.get_legend() is None and len(ax.get_legend_handles_labels()[0]) > 1:
            ax.legend(fontsize=8)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _draw_panel(ax: Any, panel: Panel, records: Records) -> bool:
    """Draw one panel's series on `ax`; False if none of them was logged."""
    if panel.style == "stack":
        return _draw_stack(ax, panel, records)
    if panel.style == "hist":
        return _draw_hist(ax, panel, records)
    drawn = False
    kinds = {name.split(".", 1)[0] for name in panel.series}
    for index, name in enumerate(panel.series):
        steps, values = _numeric(records, name)
        if not steps:
            continue
        drawn = True
        kind, key = name.split(".", 1)
        style = {"color": f"C{index}", "label": f"{key} ({kind})" if len(kinds) > 1 else key}
        if kind == EvalRecord.kind:
            _draw_eval(ax, records, key, style)
        elif panel.style == "points" and index == 0:
            ax.plot(steps, values, "o", markersize=3, zorder=3, **style)
        elif panel.style == "points":
            ax.plot(steps, values, linewidth=1.5, zorder=2, **style)
        elif len(values) > _SMOOTH_ABOVE:
            # Per-step values are noisy: faint raw line, bold moving average on top.
            ax.plot(steps, values, color=style["color"], alpha=0.25, linewidth=0.8)
            ax.plot(steps, _smooth(values), **style)
        else:
            ax.plot(steps, values, marker="o", markersize=3, **style)
    return drawn


def _draw_eval(ax: Any, records: Records, key: str, style: dict[str, str]) -> None:
    """Eval points, with error bars when every point has ci_low and ci_high."""
    points = [r for r in records.get(EvalRecord.kind, []) if _is_number(r.get(key))]
    steps, values = [r["step"] for r in points], [r[key] for r in points]
    yerr = None
    if all(_is_number(r.get("ci_low")) and _is_number(r.get("ci_high")) for r in points):
        yerr = [[r[key] - r["ci_low"] for r in points], [r["ci_high"] - r[key] for r in points]]
    dense = len(points) > 30  # frequent evals: small marks, or the bars merge into a blob
    marks = {"markersize": 2, "capsize": 0} if dense else {"markersize": 5, "capsize": 3}
    ax.errorbar(steps, values, yerr=yerr, fmt="o", zorder=3, **marks, **style)


def _draw_stack(ax: Any, panel: Panel, records: Records) -> bool:
    """Stack the series (e.g. the parts of a step's time), aligned by step."""
    columns = {name: dict(zip(*_numeric(records, name), strict=True)) for name in panel.series}
    columns = {name: column for name, column in columns.items() if column}
    if not columns:
        return False
    steps = sorted({step for column in columns.values() for step in column})
    rows = [_smooth([column.get(step, 0.0) for step in steps]) for column in columns.values()]
    labels = [name.split(".", 1)[1] for name in columns]
    ax.stackplot(steps, rows, labels=labels, alpha=0.85)
    # Outside the axes: a stack fills the panel, so any legend inside hides data.
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    return True


def _draw_hist(ax: Any, panel: Panel, records: Records) -> bool:
    """Stack the entries of a list-valued series: band i is the share at staleness i."""
    from matplotlib import colormaps

    kind, key = panel.series[0].split(".", 1)
    points = [r for r in records.get(kind, []) if isinstance(r.get(key), list) and r[key]]
    if not points:
        return False
    levels = max(len(r[key]) for r in points)
    bands = min(_MAX_STALENESS_BANDS, levels)
    rows = [[0.0] * len(points) for _ in range(bands)]
    for column, record in enumerate(points):
        # Shares, not counts: the distribution stays readable when the batch size varies.
        total = sum(record[key]) or 1
        for level, count in enumerate(record[key]):
            rows[min(level, bands - 1)][column] += count / total
    labels = [str(level) for level in range(bands)]
    if levels > bands:
        labels[-1] = f"≥{bands - 1}"
    colors = [colormaps["viridis"](i / max(1, bands - 1)) for i in range(bands)]
    steps = [r["step"] for r in points]
    ax.stackplot(steps, [_smooth(row) for row in rows], labels=labels, colors=colors)
    # Always a legend (the colours mean nothing without it), outside the full panel.
    ax.legend(
        title="versions behind",
        title_fontsize=8,
        fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1),
    )
    return True


def _smooth(values: list[float]) -> list[float]:
    """A trailing moving average for long series (window ~4 % of the length); short ones as is."""
    if len(values) <= _SMOOTH_ABOVE:
        return values
    window = max(5, len(values) // 25)
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


# ---- other sections and formatting ---------------------------------------------------------


def _read_evals(path: Path) -> tuple[dict[str, Any], str | None]:
    """eval.json as {label: summary}, plus an error message if it exists but is unusable."""
    if not path.exists():
        return {}, None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        return {}, f"eval.json is not valid JSON: {err}"
    if not isinstance(data, dict):
        return {}, "eval.json is not an object of label → summary"
    return {k: v for k, v in data.items() if isinstance(v, dict)}, None


def _evals_html(evals: dict[str, Any], error: str | None) -> str:
    """A table of every eval.json entry and its scalar fields."""
    head = "<section id='evals'><h2>Evaluations</h2>"
    if error:
        return f"{head}<p class='missing'>{_esc(error)}</p></section>"
    if not evals:
        return f"{head}<p class='missing'>no eval.json</p></section>"
    columns: list[str] = []
    for summary in evals.values():
        columns += [k for k, v in summary.items() if _scalar(v) and k not in columns]
    header = "".join(f"<th>{_esc(c)}</th>" for c in ["", *columns])
    rows = "".join(
        f"<tr><th>{_esc(label)}</th>"
        + "".join(f"<td>{_fmt(summary.get(c))}</td>" for c in columns)
        + "</tr>"
        for label, summary in evals.items()
    )
    return f"{head}<table><tr>{header}</tr>{rows}</table></section>"


def _regions_html(regions: dict[str, list[dict[str, Any]]]) -> str:
    """One row per region from its own records: versions applied, relayed, groups."""
    head = "<section id='regions'><h2>Regions</h2>"
    if not regions:
        return f"{head}<p class='missing'>no region metrics in the store</p></section>"
    columns = (
        "versions applied (last)", "mean fetch / pause", "bytes read", "versions relayed",
        "bytes across regions", "groups sent / dropped", "episodes (mean s)", "failed episodes",
    )  # fmt: skip
    rows = []
    for name, kept in sorted(regions.items()):
        by = {k: [r for r in kept if r.get("kind") == k] for k in ("applied", "relayed", "group")}
        applied, relayed, groups = by["applied"], by["relayed"], by["group"]
        episodes = [s for g in groups for s in g.get("episode_s", [])]
        fetch = [r["fetch_s"] * 1e3 for r in applied]
        pause = [r["pause_s"] * 1e3 for r in applied]
        dropped = sum(bool(g.get("dropped")) for g in groups)
        cells = (
            f"{len(applied)} ({applied[-1]['version']})" if applied else "0",
            f"{_mean(fetch):.0f} / {_mean(pause):.1f} ms" if applied else "",
            _human_bytes(sum(r["bytes"] for r in applied)),
            str(len(relayed)),
            _human_bytes(sum(r["bytes"] for r in relayed)) if relayed else "",
            f"{len(groups) - dropped} / {dropped}",
            f"{len(episodes)} ({_mean(episodes):.1f})" if episodes else "0",
            str(sum(n for g in groups for n in g.get("failures", {}).values())),
        )
        data = "".join(f"<td>{c}</td>" for c in cells)
        rows.append(f"<tr><th>{_esc(name)}</th>{data}</tr>")
    header = "".join(f"<th>{_esc(c)}</th>" for c in ("region", *columns))
    table = f"<table><tr>{header}</tr>{''.join(rows)}</table>"
    return f"{head}{table}</section>"


def _config_html(config: str | None) -> str:
    """The run's config.toml, verbatim."""
    head = "<section id='config'><h2>Configuration</h2>"
    if config is None:
        return f"{head}<p class='missing'>no config.toml</p></section>"
    return f"{head}<pre>{_esc(config)}</pre></section>"


def _logged_html(records: Records) -> str:
    """Which kinds and keys the run logged: the first place to look when a plot is empty."""
    head = "<section id='logged'><h2>Metrics logged</h2>"
    if not records:
        return f"{head}<p class='missing'>no metrics.jsonl records</p></section>"
    rows = []
    for kind, kept in sorted(records.items()):
        keys = sorted({k for r in kept for k in r} - {"kind", "step", "time", "wall"})
        rows.append(
            f"<tr><th>{_esc(kind)}</th><td>{len(kept)}</td><td>{_esc(', '.join(keys))}</td></tr>"
        )
    table = "<table><tr><th>kind</th><th>records</th><th>keys</th></tr>" + "".join(rows)
    return f"{head}{table}</table></section>"


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _scalar(value: Any) -> bool:
    return isinstance(value, int | float | str | bool) or value is None


def _fmt(value: Any) -> str:
    """A table cell: floats to 4 significant digits, everything else as text."""
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else _esc(str(value))


def _human_bytes(size: float) -> str:
    """1234567 → '1.23 MB' (decimal units, as network and storage bills count)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1000
    raise AssertionError("unreachable")


def _duration(seconds: float) -> str:
    """3725 → '1 h 02 min 05 s'."""
    hours, rest = divmod(int(seconds), 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes:02d} min {secs:02d} s"
    return f"{minutes} min {secs:02d} s" if minutes else f"{seconds:.1f} s"


def _utc(wall: float) -> str:
    return datetime.datetime.fromtimestamp(wall, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>fleetrl report: {title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1140px; margin: 2em auto; padding: 0 1em;
       color: #222; }}
h1 {{ margin-bottom: 0.2em; }}
h2 {{ border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.6em; }}
.sub, figcaption, .missing {{ color: #666; }}
nav {{ margin: 1em 0; }}
table {{ border-collapse: collapse; }}
th, td {{ text-align: left; padding: 0.25em 0.8em; border-bottom: 1px solid #eee;
         vertical-align: top; }}
figure {{ margin: 0; }}
img {{ max-width: 100%; }}
pre {{ background: #f6f6f6; padding: 1em; overflow-x: auto; }}
</style></head>
<body>
{body}
</body></html>
"""
