"""The report's figures: a section's panels drawn as one PNG, two panels per row.

Drawn with matplotlib's object API on the Agg renderer (a `Figure` saved to a buffer), so
the global pyplot backend and state are not touched; matplotlib is imported only when a
figure is drawn. `figure_png` draws each `Panel` in its style (see `fleetrl.observe.panels`)
and returns the PNG as base64 text for an inline image.
"""

from __future__ import annotations

import base64
import io
import math
from typing import Any

from fleetrl.observe.panels import Panel, Records, is_number, numeric
from fleetrl.observe.records import RECORDS, EvalRecord

SMOOTH_ABOVE = 50  # series longer than this get a moving average over the faint raw line
_MAX_STALENESS_BANDS = 8  # staleness >= 7 shares the last band; more colours are unreadable


def figure_png(panels: tuple[Panel, ...], records: Records) -> str:
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
            ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: human_bytes(y)))
            ax.yaxis.set_minor_formatter(NullFormatter())
        if ax.get_legend() is None and len(ax.get_legend_handles_labels()[0]) > 1:
            ax.legend(fontsize=8)
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def comparison_png(runs: dict[str, Records], panels: tuple[Panel, ...]) -> str:
    """Each panel's first series drawn once per run (labelled with the run's name), so
    two runs' curves share one axis; the PNG as base64 text."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.5 * len(panels), 3.1), dpi=100, layout="constrained")
    for ax, panel in zip(fig.subplots(1, len(panels), squeeze=False)[0], panels, strict=True):
        ax.set_title(panel.title, fontsize=11)
        for index, (name, records) in enumerate(runs.items()):
            steps, values = numeric(records, panel.series[0])
            if steps:
                ax.plot(
                    steps, _smooth(values), marker="o", markersize=3, color=f"C{index}", label=name
                )
        ax.set_xlabel(RECORDS[panel.series[0].split(".", 1)[0]].step_axis)
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
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
        steps, values = numeric(records, name)
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
        elif len(values) > SMOOTH_ABOVE:
            # Per-step values are noisy: faint raw line, bold moving average on top.
            ax.plot(steps, values, color=style["color"], alpha=0.25, linewidth=0.8)
            ax.plot(steps, _smooth(values), **style)
        else:
            ax.plot(steps, values, marker="o", markersize=3, **style)
    return drawn


def _draw_eval(ax: Any, records: Records, key: str, style: dict[str, str]) -> None:
    """Eval points, with error bars when every point has ci_low and ci_high."""
    points = [r for r in records.get(EvalRecord.kind, []) if is_number(r.get(key))]
    steps, values = [r["step"] for r in points], [r[key] for r in points]
    yerr = None
    if all(is_number(r.get("ci_low")) and is_number(r.get("ci_high")) for r in points):
        yerr = [[r[key] - r["ci_low"] for r in points], [r["ci_high"] - r[key] for r in points]]
    dense = len(points) > 30  # frequent evals: small marks, or the bars merge into a blob
    marks = {"markersize": 2, "capsize": 0} if dense else {"markersize": 5, "capsize": 3}
    ax.errorbar(steps, values, yerr=yerr, fmt="o", zorder=3, **marks, **style)


def _draw_stack(ax: Any, panel: Panel, records: Records) -> bool:
    """Stack the series (e.g. the parts of a step's time), aligned by step."""
    columns = {name: dict(zip(*numeric(records, name), strict=True)) for name in panel.series}
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
    if len(values) <= SMOOTH_ABOVE:
        return values
    window = max(5, len(values) // 25)
    out, total = [], 0.0
    for i, value in enumerate(values):
        total += value
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def human_bytes(size: float) -> str:
    """1234567 → '1.23 MB' (decimal units, as network and storage bills count)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(size) < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
        size /= 1000
    raise AssertionError("unreachable")
