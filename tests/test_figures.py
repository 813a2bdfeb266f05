"""The figure builders (app/figures.py) and the palette (app/palette.py): pages declare
columns, titles and units; these tests pin what the builders make of them."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import plotly.graph_objects as go
import pyarrow as pa
import pytest

from app import palette
from app.figures import (
    KEY_HOVER,
    MONEY_TICKS,
    SHARE,
    Axis,
    Column,
    Panel,
    Series,
    empty_figure,
    hbars,
    hbars_chart,
    panels,
    series_of,
    table_figure,
    waterfall,
)
from models.trace_tree import Span, build_tree

APP = Path(__file__).resolve().parents[1] / "app"
COLOUR_LITERAL = re.compile(r"#[0-9a-fA-F]{6}\b|#[0-9a-fA-F]{3}\b|rgba?\(")

DEPLOYMENTS = pa.table(
    {
        "deployment": ["llama-a100", "qwen-h100"],
        "usage_cost": [12.5, 3.25],
        "idle_cost": [4.0, 1.0],
        "total_cost": [16.5, 4.25],
        "hit_rate": [0.4, 0.9],
        "saved": [1.5, 0.25],
        "requests": [100, 7],
    }
)
COST_SERIES = series_of(
    (
        ("usage_cost", "Usage", palette.BLUE),
        ("idle_cost", "Idle", palette.GREY),
    ),
    hover="{name}: $%{x:,.2f} of $%{customdata:,.2f}",
    custom="total_cost",
)
HIT_RATE = Series(
    "hit_rate",
    None,
    palette.BLUISH_GREEN,
    hover="Hit rate: %{x:.1%}<br>Saved: $%{customdata[0]:,.4f} over %{customdata[1]:,} requests",
    custom=("saved", "requests"),
    text="saved",
    texttemplate="$%{text:,.2f} saved",
)


def test_one_trace_per_series_in_its_colour_with_its_units_in_the_hover() -> None:
    fig = hbars(DEPLOYMENTS, "deployment", COST_SERIES, x=Axis("GPU cost (USD)", prefix="$"))
    assert [t.name for t in fig.data] == ["Usage", "Idle"]
    assert [t.marker.color for t in fig.data] == [palette.BLUE, palette.GREY]
    usage = fig.data[0]
    assert usage.orientation == "h"
    assert list(usage.y) == ["llama-a100", "qwen-h100"]
    assert list(usage.x) == [12.5, 3.25]
    assert list(usage.customdata) == [16.5, 4.25]
    # the key first, the series' own line with its unit, no trace-name box
    assert usage.hovertemplate == (
        KEY_HOVER + "Usage: $%{x:,.2f} of $%{customdata:,.2f}<extra></extra>"
    )
    assert fig.layout.xaxis.title.text == "GPU cost (USD)"
    assert fig.layout.xaxis.tickprefix == "$"
    assert fig.layout.yaxis.autorange == "reversed"  # first row at the top


def test_several_series_group_with_the_legend_above_the_plot() -> None:
    fig = hbars(DEPLOYMENTS, "deployment", COST_SERIES, x=Axis("USD"))
    assert fig.layout.barmode == "group"
    assert fig.layout.showlegend is True
    assert (fig.layout.legend.y, fig.layout.legend.yanchor) == (1.0, "bottom")
    assert fig.layout.margin.t == 36


def test_stacked_bars_keep_the_legend_in_stack_order_and_percent_scales_rows() -> None:
    fig = hbars(DEPLOYMENTS, "deployment", COST_SERIES, x=Axis("USD"), stacked=True)
    assert fig.layout.barmode == "stack"
    assert fig.layout.legend.traceorder == "normal"
    assert fig.layout.barnorm is None
    shares = hbars(
        DEPLOYMENTS, "deployment", COST_SERIES, x=Axis("%", suffix="%"), stacked=True, percent=True
    )
    assert shares.layout.barnorm == "percent"
    assert shares.layout.xaxis.ticksuffix == "%"


def test_a_single_series_has_no_legend_and_labels_its_bars() -> None:
    fig = hbars(
        DEPLOYMENTS,
        "deployment",
        [HIT_RATE],
        x=Axis("Hit rate", format=SHARE, range=(0, 1)),
        hover_head="<b>%{y}</b> (deployment)<br>",
        margin={"l": 170},
    )
    (bar,) = fig.data
    assert bar.name is None
    assert fig.layout.showlegend is False
    assert fig.layout.legend.y == -0.18  # the house style's, not moved on top
    assert bar.texttemplate == "$%{text:,.2f} saved"
    assert bar.textposition == "outside"
    assert bar.cliponaxis is False
    assert [list(c) for c in bar.customdata] == [[1.5, 100], [0.25, 7]]
    assert bar.hovertemplate.startswith("<b>%{y}</b> (deployment)<br>Hit rate: %{x:.1%}")
    assert fig.layout.xaxis.tickformat == ".0%"
    assert list(fig.layout.xaxis.range) == [0, 1]
    assert fig.layout.margin.l == 170
    assert fig.layout.margin.r == 16  # the rest of the house margins stay


def test_an_empty_table_draws_empty_bars_not_an_error() -> None:
    empty = DEPLOYMENTS.slice(0, 0)
    fig = hbars(empty, "deployment", COST_SERIES, x=Axis("USD"))
    assert [len(t.y) for t in fig.data] == [0, 0]
    assert [len(t.customdata) for t in fig.data] == [0, 0]


def test_the_empty_figure_is_blank_and_transparent() -> None:
    fig = empty_figure()
    assert fig.data == ()
    assert fig.layout.xaxis.visible is False
    assert fig.layout.yaxis.visible is False
    assert fig.layout.paper_bgcolor == fig.layout.plot_bgcolor == palette.TRANSPARENT


def test_hbars_chart_is_a_chart_cards_figure_function() -> None:
    draw = hbars_chart("deployment", COST_SERIES, x=Axis("USD"), stacked=True)
    fig = draw(DEPLOYMENTS, None)
    assert isinstance(fig, go.Figure)
    assert fig.layout.barmode == "stack"


def test_series_of_names_each_series_in_its_hover() -> None:
    assert [s.hover for s in COST_SERIES] == [
        "Usage: $%{x:,.2f} of $%{customdata:,.2f}",
        "Idle: $%{x:,.2f} of $%{customdata:,.2f}",
    ]
    assert {s.custom for s in COST_SERIES} == {"total_cost"}


@pytest.mark.parametrize(
    ("axis", "settings"),
    [
        (Axis(), {}),
        (Axis("USD per 1M (log)", prefix="$", log=True), {"title_text": "USD per 1M (log)",
                                                          "type": "log", "tickprefix": "$",
                                                          "tickformat": MONEY_TICKS,
                                                          "exponentformat": "none"}),
        (Axis(prefix="$", format=",.2f"), {"tickprefix": "$", "tickformat": ",.2f"}),
        (Axis(format=".0%", range=(0, 1)), {"tickformat": ".0%", "range": [0, 1]}),
        (Axis("ms", suffix=" ms", from_zero=True), {"title_text": "ms", "ticksuffix": " ms",
                                                    "rangemode": "tozero"}),
    ],
)  # fmt: skip
def test_an_axis_sets_only_what_it_declares(axis: Axis, settings: dict) -> None:
    assert axis.settings() == settings


def test_table_figure_formats_each_column() -> None:
    fig = table_figure(
        DEPLOYMENTS,
        [
            Column("deployment", "Deployment", width=2),
            Column("hit_rate", "Hit rate", ".1%"),
            Column("total_cost", "Total", ",.2f", "$"),
        ],
    )
    (table,) = fig.data
    assert list(table.header.values) == ["<b>Deployment</b>", "<b>Hit rate</b>", "<b>Total</b>"]
    assert table.header.fill.color == palette.HEADER_FILL
    assert list(table.cells.format) == [None, ".1%", ",.2f"]
    assert list(table.cells.prefix) == [None, None, "$"]
    assert list(table.columnwidth) == [2, 1, 1]
    assert list(table.cells.values[2]) == [16.5, 4.25]


def test_panels_share_the_time_axis_one_y_axis_each() -> None:
    start = datetime(2026, 11, 30, tzinfo=UTC)
    trend = pa.table(
        {
            "bucket": [start, start + timedelta(hours=1)],
            "spend": [1.0, 2.0],
            "ttft_ms": [120.0, None],
        }
    )
    fig = panels(
        trend,
        "bucket",
        [
            Panel(
                "spend", "Spend", palette.TREND_SPEND, "$%{y:,.2f}", Axis("$ / hour", prefix="$")
            ),
            Panel(
                "ttft_ms",
                "TTFT",
                palette.TREND_TTFT,
                "%{y:,.0f} ms",
                Axis("TTFT (ms)", from_zero=True),
                line=True,
            ),
        ],
        x_axis=Axis("UTC"),
    )
    bars, line = fig.data
    assert isinstance(bars, go.Bar) and bars.marker.color == palette.TREND_SPEND
    assert isinstance(line, go.Scatter) and line.line.color == palette.TREND_TTFT
    assert line.connectgaps is False  # a missing hour is a gap, not a slope
    assert (bars.yaxis, line.yaxis) == ("y", "y2")
    assert fig.layout.yaxis.title.text == "$ / hour"
    assert fig.layout.yaxis.tickprefix == "$"
    assert fig.layout.yaxis2.rangemode == "tozero"
    assert fig.layout.xaxis2.title.text == "UTC"  # under the last panel only
    assert fig.layout.xaxis.title.text is None
    assert fig.layout.showlegend is False


def test_palette_cycle_wraps() -> None:
    assert palette.cycle(palette.DEPLOYMENTS, 0) == palette.BLUE
    assert palette.cycle(palette.DEPLOYMENTS, len(palette.DEPLOYMENTS)) == palette.BLUE
    assert palette.cycle(palette.DEPLOYMENTS, 7) == palette.DEPLOYMENTS[1]


def test_no_colour_literal_outside_the_palette() -> None:
    """Colours are named once, in app/palette.py (issue #9)."""
    found = [
        f"{path.relative_to(APP)}:{n}"
        for path in sorted(APP.rglob("*.py"))
        if path.name != "palette.py"
        for n, line in enumerate(path.read_text("utf-8").splitlines(), start=1)
        if COLOUR_LITERAL.search(line)
    ]
    assert found == []


def test_the_waterfall_colours_each_category_and_outlines_the_critical_path() -> None:
    tree = build_tree(
        [
            Span("a", None, "POST /chat", 0, 10_000_000, service="api", kind=2),
            Span("b", "a", "retrieve", 100_000, 2_000_000, stage="retrieval"),
            Span("c", "a", "tool", 2_000_000, 3_000_000, stage="tools", status_code=2),
        ]
    )
    fig = waterfall(tree)
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["retrieval"]["marker"]["color"] == palette.SPAN_RETRIEVAL
    assert by_name["tools"]["marker"]["color"] == palette.SPAN_TOOLS
    rows = {node.span.span_id: node for node in tree.nodes}
    for trace in fig["data"]:
        for span_id, outline in zip(
            (c[0] for c in trace["customdata"]), trace["marker"]["line"]["color"], strict=True
        ):
            critical = rows[span_id].critical
            assert (outline == palette.CRITICAL_PATH) is critical
    # the failed span's name is written in the failure colour, with a cross
    labels = {a["hovertext"]: a for a in fig["layout"]["annotations"]}
    assert labels["tool"]["font"]["color"] == palette.FAILED_TEXT
    assert labels["tool"]["text"].startswith("✖ ")
    assert labels["retrieve"]["font"]["color"] == palette.INK
    assert "ms" in fig["layout"]["xaxis"]["title"]["text"]  # the unit of the time axis


def test_cost_bars_are_linear_with_money_ticks() -> None:
    """Issue #10: on a log scale $0.001 vs $0.55 looked 1:10 and ticks read "$1μ". The cost
    per accepted outcome bars are linear from zero, with plain-decimal money ticks."""
    import dash
    import plotly.io as pio
    import pyarrow as pa

    dash.Dash("figures-test", use_pages=True, pages_folder="")  # pages register on an app
    from app.pages.economics import _cost_per_accepted_figure

    table = pa.table(
        {
            "key": ["cheap", "dear"],
            "cost_per_accepted": [0.001, 0.55],
            "tasks": [10, 10],
            "accepted_outcomes": [9, 9],
            "total_cost": [0.009, 4.95],
            "acceptance_rate": [0.9, 0.9],
        }
    )
    fig = _cost_per_accepted_figure("Workflow")(table, None)
    x = fig.layout.xaxis
    assert x.type in (None, "linear") and x.rangemode == "tozero"
    assert x.tickformat == MONEY_TICKS and x.exponentformat == "none"
    # the bar lengths are the values themselves: 0.55 is 550 times 0.001, not "1:10"
    (bars,) = fig.data
    assert list(bars.x) == [0.001, 0.55]
    # d3's format (what Plotly uses) writes these ticks as plain decimals
    spec = pio.to_json(fig)
    assert '"tickformat":",.4~f"' in spec.replace(" ", "")
