"""Figure builders: pages declare which columns to draw, the titles and the units; these
functions turn that into Plotly figures in the house style (issue #9: the figure code used to
be hand-copied between pages).

The common chart is a set of horizontal bars, one bar per key (deployment, workflow, route)
and one trace per :class:`Series`: :func:`hbars`. Axes are declared as :class:`Axis` values
(title and unit); hover text is a Plotly template per series, after a bold key line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app import palette
from app.formats import number
from models.trace_tree import Category, Node, TraceTree

if TYPE_CHECKING:
    import pyarrow as pa

#: What a chart card calls to draw its data: (table, filters) -> figure.
FigureFn = Callable[["pa.Table", Any], go.Figure]
#: The usual first hover line: the bar's key, in bold.
KEY_HOVER = "<b>%{y}</b><br>"


def col(table: pa.Table, name: str) -> list[Any]:
    """One column of an Arrow table as a Python list."""
    return table.column(name).to_pylist()


def empty_figure() -> go.Figure:
    """A blank, transparent figure: what a chart shows beside its empty-state line."""
    fig = go.Figure()
    fig.update_layout(
        xaxis={"visible": False},
        yaxis={"visible": False},
        margin={"l": 0, "r": 0, "t": 0, "b": 0},
        paper_bgcolor=palette.TRANSPARENT,
        plot_bgcolor=palette.TRANSPARENT,
    )
    return fig


def style(fig: go.Figure, *, money_axis: bool = False, legend: bool = True) -> go.Figure:
    """The house style: compact margins, readable fonts, money on the y axis when asked."""
    fig.update_layout(
        margin={"l": 56, "r": 16, "t": 8, "b": 40},
        font={"family": "Inter, system-ui, sans-serif", "size": 13, "color": palette.INK},
        paper_bgcolor=palette.TRANSPARENT,
        plot_bgcolor=palette.WHITE,
        hoverlabel={"font": {"size": 13}},
        showlegend=legend,
        legend={"orientation": "h", "y": -0.18},
    )
    if money_axis:
        fig.update_yaxes(
            tickprefix="$", separatethousands=True, tickformat=MONEY_TICKS, exponentformat="none"
        )
    fig.update_xaxes(gridcolor=palette.GRID)
    fig.update_yaxes(gridcolor=palette.GRID)
    return fig


def legend_on_top(fig: go.Figure) -> go.Figure:
    """Legend above the plot: below it, it collides with the axis title in a short card."""
    fig.update_layout(
        legend={"orientation": "h", "x": 0, "y": 1.0, "xanchor": "left", "yanchor": "bottom"},
        margin={"t": 36},
    )
    return fig


@dataclass(frozen=True, slots=True)
class Axis:
    """An axis's title and unit: a d3 tick format (".0%"), a prefix ("$"), a suffix ("s"),
    a log scale, a fixed range. A "$" prefix without a format gets money ticks (MONEY_TICKS).
    Cost bars use a linear scale: on a log scale $0.001 vs $0.55 looked 1:10 (issue #10)."""

    title: str | None = None
    format: str | None = None
    prefix: str | None = None
    suffix: str | None = None
    log: bool = False
    range: tuple[float, float] | None = None
    from_zero: bool = False

    def settings(self) -> dict[str, Any]:
        """The axis as Plotly's update_xaxes/update_yaxes keywords (only what is set)."""
        out: dict[str, Any] = {}
        if self.title is not None:
            out["title_text"] = self.title
        if self.log:
            out["type"] = "log"
        if self.format is not None:
            out["tickformat"] = self.format
        elif self.prefix == "$":
            # money ticks: plain decimals ($0.001, $0.55, $1,200), never SI ("$1μ", "$2k")
            out["tickformat"] = MONEY_TICKS
            out["exponentformat"] = "none"
        if self.prefix is not None:
            out["tickprefix"] = self.prefix
        if self.suffix is not None:
            out["ticksuffix"] = self.suffix
        if self.range is not None:
            out["range"] = list(self.range)
        if self.from_zero:
            out["rangemode"] = "tozero"
        return out


#: Shares of a whole (0..1) shown as whole percents.
SHARE = ".0%"
#: Money on an axis: thousands separated, up to 4 decimals with trailing zeros trimmed.
MONEY_TICKS = ",.4~f"


@dataclass(frozen=True, slots=True)
class Series:
    """One trace of bars: the column holding the values, its legend name (None: a single
    unnamed series), its colour, the hover lines after the key and the columns they read as
    %{customdata} (one name: the value itself; several: %{customdata[i]} in that order).
    `text`, when set, writes a value label outside each bar with `texttemplate`."""

    column: str
    name: str | None
    colour: str
    hover: str
    custom: str | tuple[str, ...] = ()
    text: str | None = None
    texttemplate: str | None = None

    def customdata(self, table: pa.Table) -> list[Any] | None:
        if isinstance(self.custom, str):
            return col(table, self.custom)
        if not self.custom:
            return None
        return list(zip(*(col(table, c) for c in self.custom), strict=True))


def series_of(
    parts: Iterable[tuple[str, str, str]], hover: str, custom: str | tuple[str, ...] = ()
) -> tuple[Series, ...]:
    """One :class:`Series` per (column, legend name, colour), all with the same hover lines
    and customdata; `{name}` in `hover` stands for each series' name."""
    return tuple(
        Series(column, name, colour, hover=hover.replace("{name}", name), custom=custom)
        for column, name, colour in parts
    )


def hbars(
    table: pa.Table,
    key: str,
    series: Sequence[Series],
    *,
    x: Axis,
    y: Axis | None = None,
    stacked: bool = False,
    percent: bool = False,
    hover_head: str = KEY_HOVER,
    margin: dict[str, int] | None = None,
) -> go.Figure:
    """Horizontal bars, one row per value of `key` (in the table's order, first at the top),
    one trace per series: grouped side by side, or `stacked` (`percent`: each row scaled to
    100 %). The legend shows above the plot when there is more than one series."""
    keys = col(table, key)
    bars = []
    for s in series:
        bar: dict[str, Any] = {
            "y": keys,
            "x": col(table, s.column),
            "orientation": "h",
            "marker_color": s.colour,
            "hovertemplate": f"{hover_head}{s.hover}<extra></extra>",
        }
        if s.name is not None:
            bar["name"] = s.name
        custom = s.customdata(table)
        if custom is not None:
            bar["customdata"] = custom
        if s.text is not None:
            bar.update(
                text=col(table, s.text),
                texttemplate=s.texttemplate,
                textposition="outside",
                cliponaxis=False,
            )
        bars.append(go.Bar(**bar))
    fig = go.Figure(bars)
    legend = len(series) > 1
    if legend:
        fig.update_layout(barmode="stack" if stacked else "group")
        if stacked:
            fig.update_layout(legend_traceorder="normal")
        if percent:
            fig.update_layout(barnorm="percent")
    fig.update_xaxes(**x.settings())
    fig.update_yaxes(autorange="reversed", **(y.settings() if y else {}))
    style(fig, legend=legend)
    if margin:
        fig.update_layout(margin=margin)
    return legend_on_top(fig) if legend else fig


def hbars_chart(key: str, series: Sequence[Series], **options: Any) -> FigureFn:
    """:func:`hbars` as a chart card's figure function (table, filters) -> figure
    (app.components.chart); `options` are hbars' keywords."""

    def figure(table: pa.Table, _filters: Any) -> go.Figure:
        return hbars(table, key, series, **options)

    return figure


@dataclass(frozen=True, slots=True)
class Column:
    """A column of a table figure: the data column, its header, a d3 number format, a prefix
    ("$") and its relative width."""

    column: str
    header: str
    format: str | None = None
    prefix: str | None = None
    width: float = 1


def table_figure(table: pa.Table, columns: Sequence[Column]) -> go.Figure:
    """A compact table drawn as a figure (so it sits in a chart card with its CSV button)."""
    fig = go.Figure(
        go.Table(
            header={
                "values": [f"<b>{c.header}</b>" for c in columns],
                "fill_color": palette.HEADER_FILL,
                "align": "left",
                "font": {"size": 12},
            },
            cells={
                "values": [col(table, c.column) for c in columns],
                "format": [c.format for c in columns],
                "prefix": [c.prefix for c in columns],
                "align": "left",
                "height": 28,
                "font": {"size": 12},
            },
            columnwidth=[c.width for c in columns],
        )
    )
    fig.update_layout(margin={"l": 0, "r": 0, "t": 0, "b": 0}, paper_bgcolor=palette.TRANSPARENT)
    return fig


@dataclass(frozen=True, slots=True)
class Panel:
    """One panel of :func:`panels`: a column over time, as bars or (`line`) as a line with
    markers that leaves gaps where the value is missing; its hover template and y axis."""

    column: str
    name: str
    colour: str
    hover: str
    y: Axis
    line: bool = False


def panels(table: pa.Table, x: str, rows: Sequence[Panel], *, x_axis: Axis) -> go.Figure:
    """Panels stacked one above the other on a shared x axis (time), no legend: each panel's
    y axis title names it."""
    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.07)
    xs = col(table, x)
    for row, p in enumerate(rows, start=1):
        if p.line:
            trace: go.Bar | go.Scatter = go.Scatter(
                x=xs,
                y=col(table, p.column),
                name=p.name,
                mode="lines+markers",
                connectgaps=False,
                line={"color": p.colour},
                hovertemplate=p.hover,
            )
        else:
            trace = go.Bar(
                x=xs,
                y=col(table, p.column),
                name=p.name,
                marker_color=p.colour,
                hovertemplate=p.hover,
            )
        fig.add_trace(trace, row=row, col=1)
    style(fig, legend=False)
    for row, p in enumerate(rows, start=1):
        fig.update_yaxes(**p.y.settings(), row=row, col=1)
    fig.update_xaxes(**x_axis.settings(), row=len(rows), col=1)
    return fig


# --- the trace waterfall ---------------------------------------------------------------------
LABEL_CHARS = 36  # the label column's width, in characters of its font
LABEL_DOMAIN = 0.36  # the share of the figure's width that the label column takes
INDENT = 0.018  # per depth level, in the figure's width
#: A trace's spans by category (engine spans by stage): colour and legend name.
SPAN_COLOURS = {
    Category.SERVER.value: palette.SPAN_SERVER,
    Category.LLM_CALL.value: palette.SPAN_LLM_CALL,
    Category.ENGINE.value: palette.SPAN_ENGINE,
    "queue": palette.STAGE_QUEUE,
    "prefill": palette.STAGE_PREFILL,
    "decode": palette.STAGE_DECODE,
    Category.RETRIEVAL.value: palette.SPAN_RETRIEVAL,
    Category.TOOLS.value: palette.SPAN_TOOLS,
    Category.OTHER.value: palette.SPAN_OTHER,
}
SPAN_LEGEND = {
    Category.SERVER.value: "server span",
    Category.LLM_CALL.value: "LLM call (app)",
    Category.ENGINE.value: "engine span",
    "queue": "engine: queue",
    "prefill": "engine: prefill",
    "decode": "engine: decode",
    Category.RETRIEVAL.value: "retrieval",
    Category.TOOLS.value: "tools",
    Category.OTHER.value: "other",
}


def _label(node: Node) -> str:
    """The span's name, shortened to fit its indented place in the label column."""
    room = max(LABEL_CHARS - 2 * node.depth, 12)
    name = node.span.name if len(node.span.name) <= room else node.span.name[: room - 1] + "…"
    return ("✖ " if node.span.failed else "") + name


def _hover_lines(node: Node) -> str:
    span = node.span
    lines = [f"service {span.service or '–'}"]
    if span.model:
        lines.append(f"model {span.model}")
    if span.input_tokens is not None or span.output_tokens is not None:
        lines.append(f"tokens {number(span.input_tokens)} in → {number(span.output_tokens)} out")
    for seg in node.segments:
        lines.append(f"{seg.stage} {seg.duration_ms:,.1f} ms")
    if span.failed:
        lines.append("status: error")
    if node.orphan:
        lines.append("parent span not found: shown as a root")
    if node.critical:
        lines.append("on the critical path")
    return "<br>".join(lines)


def waterfall(tree: TraceTree) -> dict[str, Any]:
    """One row per span (depth-first, indented), bars from the trace's start; engine spans as
    their queue / prefill / decode stretches. A plotly figure as a dict."""
    bars: dict[str, dict[str, list[Any]]] = {}

    def add(group: str, row: int, node: Node, base: float, width: float) -> None:
        b = bars.setdefault(
            group, {"y": [], "base": [], "x": [], "custom": [], "line": [], "lw": []}
        )
        b["y"].append(row)
        b["base"].append(base)
        b["x"].append(width)
        b["custom"].append(
            [
                node.span.span_id,
                node.span.name,
                node.duration_ms,
                node.offset_ms,
                _hover_lines(node),
            ]
        )
        b["line"].append(
            palette.CRITICAL_PATH if node.critical else SPAN_COLOURS.get(group, palette.SPAN_OTHER)
        )
        b["lw"].append(2 if node.critical else 1)

    for row, node in enumerate(tree.nodes):
        if node.segments:
            for seg in node.segments:
                add(seg.stage, row, node, seg.offset_ms, seg.duration_ms)
        else:
            add(node.category.value, row, node, node.offset_ms, node.duration_ms)

    traces = [
        {
            "type": "bar",
            "name": SPAN_LEGEND[group],
            "orientation": "h",
            "y": bars[group]["y"],
            "base": bars[group]["base"],
            "x": bars[group]["x"],
            "customdata": bars[group]["custom"],
            "marker": {
                "color": SPAN_COLOURS[group],
                "line": {"color": bars[group]["line"], "width": bars[group]["lw"]},
            },
            "width": 0.62,
            "hovertemplate": (
                "<b>%{customdata[1]}</b><br>%{customdata[2]:,.1f} ms, starting at "
                "+%{customdata[3]:,.1f} ms<br>%{customdata[4]}<extra>%{fullData.name}</extra>"
            ),
        }
        for group in SPAN_COLOURS
        if group in bars
    ]
    rows = len(tree.nodes)
    layout = {
        # style()'s house style (above), written out: a plain dict skips plotly's
        # validation, which cost ~100 ms a trace (callbacks have 300 ms)
        "font": {"family": "Inter, system-ui, sans-serif", "size": 13, "color": palette.INK},
        "paper_bgcolor": palette.TRANSPARENT,
        "plot_bgcolor": palette.WHITE,
        "hoverlabel": {"font": {"size": 13}},
        "barmode": "overlay",
        "height": max(240, 110 + 24 * rows),
        "margin": {"l": 8, "r": 16, "t": 36, "b": 40},
        "legend": {
            "orientation": "h",
            "yref": "container",
            "y": 1,
            "yanchor": "top",
            "x": 0,
            "font": {"size": 12},
        },
        "clickmode": "event",
        # the span names, indented by depth (tick labels are right-aligned: no indent there)
        "annotations": [
            {
                "x": INDENT * node.depth,
                "y": row,
                "xref": "paper",
                "yref": "y",
                "xanchor": "left",
                "text": _label(node),
                "hovertext": node.span.name,
                "showarrow": False,
                "font": {
                    "size": 11,
                    "color": palette.FAILED_TEXT if node.span.failed else palette.INK,
                },
            }
            for row, node in enumerate(tree.nodes)
        ],
        "yaxis": {
            "tickvals": list(range(rows)),
            "showticklabels": False,
            "autorange": "reversed",
            "fixedrange": True,
            "showgrid": False,
        },
        "xaxis": {
            "domain": [LABEL_DOMAIN, 1],
            "title": {"text": "ms from the trace's start"},
            "rangemode": "tozero",
            "zeroline": False,
            "gridcolor": palette.GRID,
        },
    }
    return {"data": traces, "layout": layout}


# --- budgets (issue #12) ---------------------------------------------------------------------
def sparkline(
    actual: Sequence[tuple[Any, float]],
    limit: float,
    *,
    over: bool = False,
    period: tuple[Any, Any] | None = None,
) -> go.Figure:
    """A budget's cumulative spend so far (a line) against its limit (a dashed line), for a
    row of the budgets list: no axes, no legend, no hover chrome; the x axis spans `period`
    (start, end) when given, so the line's length shows how far the period has run. `over`
    draws it in the alarm colour."""
    xs = [x for x, _ in actual]
    colour = palette.VERMILION if over else palette.BRAND
    fig = go.Figure(
        [
            go.Scatter(
                x=xs,
                y=[y for _, y in actual],
                name="Spent",
                mode="lines",
                line={"color": colour, "width": 2},
                hovertemplate="%{x|%Y-%m-%d %H:00}: $%{y:,.2f}<extra></extra>",
            )
        ]
    )
    fig.add_hline(y=limit, line={"color": palette.INK, "width": 1, "dash": "dash"})
    top = max([limit, *(y for _, y in actual)]) * 1.05
    fig.update_layout(
        margin={"l": 0, "r": 0, "t": 2, "b": 2},
        paper_bgcolor=palette.TRANSPARENT,
        plot_bgcolor=palette.TRANSPARENT,
        showlegend=False,
        xaxis={"visible": False, **({"range": list(period)} if period else {})},
        yaxis={"visible": False, "range": [0, top]},
    )
    return fig


def budget_figure(
    actual: Sequence[tuple[Any, float]],
    band: Sequence[tuple[Any, float, float, float]],
    limit: float,
    *,
    currency: str = "USD",
    period: tuple[Any, Any] | None = None,
    thresholds: Sequence[tuple[float, float]] = (),
) -> go.Figure:
    """A budget's detail chart: cumulative actual spend (line), the forecast band to the end
    of its period (P10–P90 shaded, P50 dashed) and the limit (a horizontal line). Traces in
    that order: Actual, P90, P10 (filled up to P90), P50 forecast, Limit. `thresholds`
    (percent, amount) below 100 % are dotted lines, labelled, drawn as shapes (no trace)."""
    unit = "$" if currency == "USD" else ""
    suffix = "" if currency == "USD" else f" {currency}"
    money_hover = f"{unit}%{{y:,.2f}}{suffix}"
    bx = [b[0] for b in band]
    fig = go.Figure(
        [
            go.Scatter(
                x=[x for x, _ in actual],
                y=[y for _, y in actual],
                name="Actual (cumulative)",
                mode="lines",
                line={"color": palette.BRAND, "width": 2.5, "shape": "hv"},
                hovertemplate=f"%{{x|%Y-%m-%d %H:00}} UTC<br>Spent {money_hover}<extra></extra>",
            ),
            go.Scatter(
                x=bx,
                y=[b[3] for b in band],
                name="Forecast P90",
                mode="lines",
                line={"color": palette.SKY_BLUE, "width": 0.5},
                showlegend=False,
                hovertemplate=f"P90 {money_hover}<extra></extra>",
            ),
            go.Scatter(
                x=bx,
                y=[b[1] for b in band],
                name="Forecast P10–P90",
                mode="lines",
                fill="tonexty",
                fillcolor=palette.FORECAST_BAND,
                line={"color": palette.SKY_BLUE, "width": 0.5},
                hovertemplate=f"P10 {money_hover}<extra></extra>",
            ),
            go.Scatter(
                x=bx,
                y=[b[2] for b in band],
                name="Forecast P50",
                mode="lines",
                line={"color": palette.BLUE, "width": 2, "dash": "dash"},
                hovertemplate=f"%{{x|%Y-%m-%d %H:00}} UTC<br>P50 {money_hover}<extra></extra>",
            ),
        ]
    )
    xs = [x for x, _ in actual] + bx
    ends = list(period) if period is not None else [min(xs, default=None), max(xs, default=None)]
    fig.add_trace(
        go.Scatter(
            x=ends,
            y=[limit, limit],
            name="Limit",
            mode="lines",
            line={"color": palette.VERMILION, "width": 2},
            hovertemplate=f"Limit {money_hover}<extra></extra>",
        )
    )
    for percent, level in thresholds:
        if percent < 100:
            fig.add_hline(
                y=level,
                line={"color": palette.GREY, "width": 1, "dash": "dot"},
                annotation_text=f"{percent:g} %",
                annotation_position="top left",
            )
    style(fig)
    fig.update_yaxes(
        title_text=f"Cumulative spend ({currency})",
        tickprefix=unit,
        separatethousands=True,
        rangemode="tozero",
    )
    fig.update_xaxes(title_text="UTC")
    legend_on_top(fig)
    fig.update_layout(legend={"traceorder": "normal"})
    return fig
