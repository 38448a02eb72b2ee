"""The run report: one self-contained `report.html` with a summary table and plots.

Role: `write_report(run_dir)` reads `run_dir/metrics.jsonl` (see `fleetrl.observe.metrics`),
`run_dir/config.toml` (shown verbatim) and `run_dir/eval.json` if present, and writes
`run_dir/report.html`; given the regions' own metrics (read from the run's store by the
caller, `fleetrl.store.region_metrics`, so regions that ran elsewhere show too), a table
per region. The page has no external assets: plots are inline base64 PNGs drawn
by `fleetrl.observe.charts`.

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

import datetime
import html
import json
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from fleetrl.observe.charts import SMOOTH_ABOVE, comparison_png, figure_png, human_bytes
from fleetrl.observe.metrics import read_metrics
from fleetrl.observe.panels import Panel, Records, is_number, numeric, series
from fleetrl.observe.records import EvalRecord, SyncRecord, TrainRecord

_FINAL_WINDOW = 10  # "final" train numbers are the mean of this many last steps (one is noise)


_train = partial(series, TrainRecord)
_sync = partial(series, SyncRecord)
_eval = partial(series, EvalRecord)


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


def write_report(
    run_dir: Path,
    regions: dict[str, list[dict[str, Any]]] | None = None,
    compare: Path | None = None,
) -> Path:
    """Write `run_dir/report.html` from the run's metrics, config and evals, and the
    regions' own records if given (region -> records of kinds "applied", "relayed",
    "group"); with `compare` (another run directory), a first section puts the two runs'
    reward and mismatch curves side by side. Returns its path."""
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
        f"{SMOOTH_ABOVE} points the faint line is per step and the bold one a moving "
        "average.</p>",
        _summary_table(run_dir.name, raw, records, evals),
        "<nav>"
        + " · ".join(f"<a href='#{s.anchor}'>{_esc(s.title)}</a>" for s in SECTIONS)
        + " · <a href='#regions'>Regions</a> · <a href='#evals'>Evaluations</a>"
        " · <a href='#config'>Configuration</a> · <a href='#logged'>Metrics logged</a></nav>",
    ]
    if compare is not None:
        other = compare / "metrics.jsonl"
        theirs = _by_kind(read_metrics(other)) if other.exists() else {}
        body.append(_comparison_html({run_dir.name: records, compare.name: theirs}))
    body += [_section_html(section, records) for section in SECTIONS]
    body.append(_regions_html(regions or {}))
    body.append(_evals_html(evals, eval_error))
    body.append(_summaries_html(run_dir / "summaries.json"))
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


def _logged(records: Records, name: str) -> bool:
    """Whether any record of the series' kind has its key."""
    kind, key = name.split(".", 1)
    return any(r.get(key) is not None for r in records.get(kind, []))


# ---- summary -------------------------------------------------------------------------------


def _summary_table(
    name: str, raw: list[dict[str, Any]], records: Records, evals: dict[str, Any]
) -> str:
    """The table at the top of the page: the run's headline numbers."""
    missing = "<span class='missing'>not logged</span>"
    times = [r["time"] for r in raw if is_number(r.get("time"))]
    walls = [r["wall"] for r in raw if is_number(r.get("wall"))]
    train = records.get(TrainRecord.kind, [])
    rows = [
        ("run", _esc(name)),
        ("started", _utc(min(walls)) if walls else missing),
        ("duration", _duration(max(times)) if times else missing),
        ("train steps", f"{train[-1]['step']} ({len(train)} logged)" if train else missing),
    ]
    finals = (("final reward", _train("reward")), ("final pass rate", _train("pass_rate")))
    for label, name in finals:
        values = numeric(records, name)[1][-_FINAL_WINDOW:]
        if values:
            rows.append((label, f"{_mean(values):.3f} (mean of last {len(values)} steps)"))
        else:
            rows.append((label, missing))
    rows.append(("held-out pass@1", _base_vs_final(records, evals) or missing))
    rows.append(("weight sync", _sync_summary(records) or missing))
    speeds = []
    for key, unit in (("samples_per_s", "samples/s"), ("tokens_per_s", "tokens/s")):
        values = numeric(records, _train(key))[1]
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
        points = [r for r in records.get(EvalRecord.kind, []) if is_number(r.get("pass_at_1"))]
        if not points:
            return None
        ends = [points[0], points[-1]] if len(points) > 1 else [points[0]]
        pairs = [(f"step {r['step']}", r) for r in ends]
    text = " → ".join(f"{_esc(label)}: {_pass_at_1(s)}" for label, s in pairs)
    first, last = (s.get("pass_at_1") for _, s in (pairs[0], pairs[-1]))
    if len(pairs) == 2 and is_number(first) and is_number(last):
        text += f" (Δ {last - first:+.3f})"
    return text


def _pass_at_1(summary: dict[str, Any]) -> str:
    """'0.312 [0.250, 0.371], n=200' with whatever of those fields the summary has."""
    value = summary.get("pass_at_1")
    text = f"{value:.3f}" if is_number(value) else "?"
    low, high = summary.get("ci_low"), summary.get("ci_high")
    if is_number(low) and is_number(high):
        text += f" [{low:.3f}, {high:.3f}]"
    if "n" in summary:
        text += f", n={_esc(str(summary['n']))}"
    return text


def _sync_summary(records: Records) -> str | None:
    """Total bytes sent, compared with full snapshots, and the mean engine pause."""
    sent = numeric(records, _sync("sync_bytes"))[1]
    if not sent:
        return None
    text = f"{human_bytes(sum(sent))} over {len(sent)} version{'s' * (len(sent) != 1)}"
    full = numeric(records, _sync("full_bytes"))[1]
    if full and sum(sent) > 0:
        text += f" (full snapshots: {human_bytes(sum(full))}, {sum(full) / sum(sent):.1f}x more)"
    pauses = numeric(records, _sync("sync_pause_ms"))[1]
    if pauses:
        text += f"; mean pause {_mean(pauses):.1f} ms"
    return text


# ---- plotted sections ----------------------------------------------------------------------


def _section_html(section: Section, records: Records) -> str:
    """A section: its title, then the figure and caption, or a 'not logged' note."""
    head = f"<section id='{section.anchor}'><h2>{_esc(section.title)}</h2>"
    names = [name for panel in section.panels for name in panel.series]
    if not any(_logged(records, name) for name in names):
        keys = ", ".join(names)
        return f"{head}<p class='missing'>not logged ({_esc(keys)})</p></section>"
    png = figure_png(section.panels, records)
    image = f"<img alt='{_esc(section.title)}' src='data:image/png;base64,{png}'>"
    caption = f"<figcaption>{_esc(section.caption)}</figcaption>"
    return f"{head}<figure>{image}{caption}</figure></section>"


COMPARED = (
    Panel("reward", (_train("reward"),), "mean reward"),
    Panel("mismatch, k3 KL(engine ‖ trainer)", (_train("mismatch_kl_k3"),), "nats/token"),
)


def _comparison_html(runs: dict[str, Records]) -> str:
    """Two runs' reward and mismatch per step on shared axes (`fleetrl report --compare`)."""
    names = " and ".join(_esc(name) for name in runs)
    png = comparison_png(runs, COMPARED)
    return (
        f"<section id='compare'><h2>Compared: {names}</h2><figure>"
        f"<img alt='compared runs' src='data:image/png;base64,{png}'><figcaption>Mean "
        "reward of the samples trained on, and the train/inference mismatch the trainer "
        "measured, per step, for both runs (a moving average where long).</figcaption>"
        "</figure></section>"
    )


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


def _summaries_html(path: Path) -> str:
    """Summaries.json, if present: per task, its facts and what each model's summaries
    kept of them, base beside final (self-summarisation on tasks longer than the window)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        tasks = data["tasks"]
        labels = [label for label in data if label != "tasks"]
    except (OSError, ValueError, KeyError, TypeError):
        return ""
    head = (
        "<section id='summaries'><h2>Summaries before and after training</h2><p class='sub'>"
        "What each model wrote when its context filled, on held-out tasks (one episode "
        "each); the facts the task needs, and which of them the summaries kept.</p>"
    )
    rows = []
    for index, task in enumerate(tasks):
        facts = ", ".join(f"<code>{_esc(str(f))}</code>" for f in task.get("facts", []))
        cells = []
        for label in labels:
            episode = data[label][index] if index < len(data[label]) else {}
            text = "<br>".join(_esc(s) for s in episode.get("summaries", [])) or "(none)"
            kept = len(episode.get("kept", []))
            cells.append(
                f"<td><b>{_esc(label)}</b>: {kept}/{len(task.get('facts', []))} facts kept, "
                f"reward {_fmt(episode.get('reward'))}<br><code>{text}</code></td>"
            )
        rows.append(f"<tr><th>{_esc(task['task_id'])}<br>{facts}</th>{''.join(cells)}</tr>")
    return f"{head}<table>{''.join(rows)}</table></section>"


def _regions_html(regions: dict[str, list[dict[str, Any]]]) -> str:
    """One row per region from its own records: versions applied, relayed, groups."""
    head = "<section id='regions'><h2>Regions</h2>"
    if not regions:
        return f"{head}<p class='missing'>no region metrics in the store</p></section>"
    columns = (
        "versions applied (last)", "mean fetch / pause", "bytes read", "versions relayed",
        "bytes across regions", "groups sent / dropped", "groups drawn again (then solved)",
        "groups guided", "episodes (mean s)", "failed episodes",
    )  # fmt: skip
    rows = []
    for name, kept in sorted(regions.items()):
        by = {k: [r for r in kept if r.get("kind") == k] for k in ("applied", "relayed", "group")}
        applied, relayed, groups = by["applied"], by["relayed"], by["group"]
        episodes = [s for g in groups for s in g.get("episode_s", [])]
        fetch = [r["fetch_s"] * 1e3 for r in applied]
        pause = [r["pause_s"] * 1e3 for r in applied]
        dropped = sum(bool(g.get("dropped")) for g in groups)
        redrawn = [g for g in groups if g.get("draws", 1) > 1]
        solved = sum(max(g.get("rewards") or [0.0]) > 0 and not g.get("guided") for g in redrawn)
        cells = (
            f"{len(applied)} ({applied[-1]['version']})" if applied else "0",
            f"{_mean(fetch):.0f} / {_mean(pause):.1f} ms" if applied else "",
            human_bytes(sum(r["bytes"] for r in applied)),
            str(len(relayed)),
            human_bytes(sum(r["bytes"] for r in relayed)) if relayed else "",
            f"{len(groups) - dropped} / {dropped}",
            f"{len(redrawn)} ({solved})",
            str(sum(bool(g.get("guided")) for g in groups)),
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
