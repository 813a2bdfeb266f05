"""How the pages write numbers: money, counts and durations, short and with a dash for none.
Plain functions of a value (no Dash, no Plotly), used by pages, components and figures."""

from __future__ import annotations


def money(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1_000_000:
        return f"${value / 1_000_000:,.2f}M"
    if abs(value) >= 10_000:
        return f"${value:,.0f}"
    return f"${value:,.{digits}f}"


def number(value: float | None) -> str:
    if value is None:
        return "–"
    if abs(value) >= 1_000_000_000:  # a week of tokens: 3.76B, not 3,764.35M (tiles overflowed)
        return f"{value / 1_000_000_000:,.2f}B"
    if abs(value) >= 1_000_000:
        return f"{value / 1_000_000:,.2f}M"
    if abs(value) >= 10_000:
        return f"{value / 1_000:,.1f}k"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def seconds(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value * 1000:,.0f} ms" if value < 1 else f"{value:,.2f} s"


def coverage_marks(estimated_cost: float, unpriced_requests: int) -> str:
    """What a spend figure holds that was not measured (docs/cost-model.md, "Coverage"):
    "; $X of it estimated (no GPU metrics); unpriced: N requests", or "" when all measured.
    Every page that shows a spend total appends it, so missing data never reads as free."""
    out = ""
    if estimated_cost > 0:
        out += f"; {money(estimated_cost)} of it estimated (no GPU metrics)"
    if unpriced_requests:
        out += f"; unpriced: {number(unpriced_requests)} requests"
    return out
