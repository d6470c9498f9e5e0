"""Throughput charts as server-rendered SVG: no JavaScript, no charting library.

Two charts per window from a :func:`runlane.operator.throughput_series_view`: stacked
bars of the attempts that ended per bar (succeeded, failed, retried, cancelled), and
the start latency p50/p95 as two lines. Colours come from ``dashboard.css`` through
classes (the page's policy allows no inline style). Each bar carries its counts as
``data-*`` attributes and a ``<title>`` tooltip, so what a chart shows can be read
back from the page.
"""

from __future__ import annotations

from datetime import datetime
from html import escape

from markupsafe import Markup

from runlane.operator import THROUGHPUT_OUTCOMES as OUTCOME_SERIES
from runlane.operator import View

#: The plot's size in SVG units (it scales to the page's width).
WIDTH, HEIGHT = 720, 150
#: Room for the axis labels: left and below the plot.
LEFT, BOTTOM, TOP = 44, 18, 8


def finished_chart(series: View) -> Markup:
    """Stacked bars: attempts that ended per bar, by outcome."""
    points = series["points"]
    plot_width, plot_height = WIDTH - LEFT, HEIGHT - BOTTOM - TOP
    peak = max((sum(p[name] for name in OUTCOME_SERIES) for p in points), default=0) or 1
    slot = plot_width / max(len(points), 1)
    parts = [_frame(series, "finished", f"{peak}")]
    for index, point in enumerate(points):
        x = LEFT + index * slot
        data = " ".join(f'data-{name}="{point[name]}"' for name in OUTCOME_SERIES)
        label = ", ".join(f"{point[name]} {name}" for name in OUTCOME_SERIES if point[name])
        parts.append(
            f'<g class="bar" data-at="{escape(point["at"])}" {data}>'
            f"<title>{escape(_clock(point['at']))}: {escape(label or 'nothing ended')}</title>"
        )
        base = TOP + plot_height
        for name in OUTCOME_SERIES:
            height = point[name] / peak * plot_height
            if height:
                base -= height
                parts.append(
                    f'<rect class="bar-{name}" x="{x + 0.5:.1f}" y="{base:.1f}" '
                    f'width="{max(slot - 1, 0.5):.1f}" height="{height:.1f}"/>'
                )
        parts.append("</g>")
    parts.append("</svg>")
    return Markup("".join(parts))


def latency_chart(series: View) -> Markup:
    """Two lines: start latency p50 and p95 per bar (gaps where nothing started)."""
    points = series["points"]
    plot_width, plot_height = WIDTH - LEFT, HEIGHT - BOTTOM - TOP
    peak = max((p["latency_p95_ms"] or 0 for p in points), default=0) or 1
    slot = plot_width / max(len(points), 1)
    parts = [_frame(series, "latency", _milliseconds(peak))]
    for key, css in (("latency_p95_ms", "line-p95"), ("latency_p50_ms", "line-p50")):
        for run in _runs_of_values(points, key):
            coordinates = " ".join(
                f"{LEFT + (index + 0.5) * slot:.1f},"
                f"{TOP + plot_height - value / peak * plot_height:.1f}"
                for index, value in run
            )
            parts.append(f'<polyline class="{css}" points="{coordinates}"/>')
        for index, point in enumerate(points):
            value = point[key]
            if value is not None:
                x = LEFT + (index + 0.5) * slot
                y = TOP + plot_height - value / peak * plot_height
                name = "p95" if key == "latency_p95_ms" else "p50"
                parts.append(
                    f'<circle class="dot-{name}" cx="{x:.1f}" cy="{y:.1f}" r="2">'
                    f"<title>{escape(_clock(point['at']))}: {name} "
                    f"within {_milliseconds(value)}</title></circle>"
                )
    parts.append("</svg>")
    return Markup("".join(parts))


def _frame(series: View, kind: str, peak_label: str) -> str:
    """The ``<svg>`` start, axes and their labels (peak, zero, first and last time)."""
    points = series["points"]
    bottom = HEIGHT - BOTTOM
    first = _clock(points[0]["at"]) if points else ""
    last = _clock(points[-1]["at"]) if points else ""
    title = "attempts ended" if kind == "finished" else "start latency"
    return (
        f'<svg class="chart chart-{kind}" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
        f'data-window="{escape(series["window"])}" '
        f'xmlns="http://www.w3.org/2000/svg"><title>{title}, last {escape(series["window"])}'
        f"</title>"
        f'<line class="axis" x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}"/>'
        f'<line class="axis" x1="{LEFT}" y1="{bottom}" x2="{WIDTH}" y2="{bottom}"/>'
        f'<text class="tick" x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end">{peak_label}</text>'
        f'<text class="tick" x="{LEFT - 4}" y="{bottom}" text-anchor="end">0</text>'
        f'<text class="tick" x="{LEFT}" y="{HEIGHT - 4}">{escape(first)}</text>'
        f'<text class="tick" x="{WIDTH}" y="{HEIGHT - 4}" text-anchor="end">{escape(last)}</text>'
    )


def _runs_of_values(points: list[View], key: str) -> list[list[tuple[int, float]]]:
    """Consecutive points that have a value, as (index, value) runs: a line has gaps."""
    runs: list[list[tuple[int, float]]] = [[]]
    for index, point in enumerate(points):
        value = point[key]
        if value is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append((index, float(value)))
    return [run for run in runs if run]


def _clock(iso_time: str) -> str:
    return datetime.fromisoformat(iso_time).strftime("%H:%MZ")


def _milliseconds(value: float) -> str:
    return f"{value / 1000:g} s" if value >= 1000 else f"{value:g} ms"
