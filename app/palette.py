"""Every colour the pages draw with, named once. Pages and figure builders refer to these names,
never to hex literals, so a colour means the same thing on every page (issue #9).

Two families: the Okabe-Ito palette for categories a reader must tell apart (outcomes,
deployments, percentiles: distinguishable with the common colour-vision deficiencies), and the
house colours of the frame (ink, grid, brand blue) that match assets/style.css.
"""

from __future__ import annotations

# --- Okabe-Ito ---------------------------------------------------------------------------------
BLUE = "#0072B2"
ORANGE = "#E69F00"
BLUISH_GREEN = "#009E73"
REDDISH_PURPLE = "#CC79A7"
VERMILION = "#D55E00"
SKY_BLUE = "#56B4E9"
GREY = "#999999"

#: One colour per deployment, in order of appearance (wraps after six).
DEPLOYMENTS = (BLUE, ORANGE, BLUISH_GREEN, REDDISH_PURPLE, VERMILION, SKY_BLUE)

# --- house colours -----------------------------------------------------------------------------
BRAND = "#0b5cad"  # links, the main series of a chart
INK = "#1f2933"  # text
GRID = "#e4e7eb"
WHITE = "#ffffff"
TRANSPARENT = "rgba(0,0,0,0)"
HEADER_FILL = "#f6f8fa"  # table headers
FAILED_ROW_FILL = "#fff1f0"  # a failed request's row
FAILED_TEXT = "#b91c1c"
HOT_ROW_FILL = "#fde8e1"  # a replica far hotter than its deployment's mean

#: The Overview trend's three panels.
TREND_SPEND = BRAND
TREND_REQUESTS = "#2f855a"
TREND_TTFT = "#b7410e"

#: Spend by key (teams, apps, ...): a series per key, in order of size (wraps).
SERIES = (
    BRAND,
    TREND_REQUESTS,
    TREND_TTFT,
    "#6b46c1",
    "#975a16",
    "#2c7a7b",
    "#c53030",
    "#4a5568",
    "#553c9a",
)
NOT_A_KEY = "#5f6b7a"  # '(idle)' and '(other)': spend that is no team's

# --- trace waterfall, one colour per span category or engine stage -----------------------------
SPAN_SERVER = "#6b7280"
SPAN_LLM_CALL = BRAND
SPAN_ENGINE = "#7c3aed"
STAGE_QUEUE = "#b7791f"
STAGE_PREFILL = "#c2410c"
STAGE_DECODE = "#15803d"
SPAN_RETRIEVAL = "#0e7490"
SPAN_TOOLS = "#a21caf"
SPAN_OTHER = "#9ca3af"
CRITICAL_PATH = "#111827"  # the outline of a span on the critical path

# --- budget and alert badges: (text, background), contrast 4.5:1 or more (issue #12) ----------
BADGE_GOOD = ("#14532d", "#dcfce7")
BADGE_CAUTION = ("#713f12", "#fef3c7")
BADGE_RISK = ("#7c2d12", "#ffedd5")
BADGE_BAD = (WHITE, FAILED_TEXT)
BADGE_INFO = ("#1e3a8a", "#dbeafe")
BADGE_NEUTRAL = ("#374151", "#e5e7eb")
BADGE_UNKNOWN = (INK, "#e5e7eb")
FORECAST_BAND = "rgba(86,180,233,0.25)"  # SKY_BLUE at a quarter: the P10-P90 band


def cycle(colours: tuple[str, ...], i: int) -> str:
    """The i-th colour of a palette, wrapping round."""
    return colours[i % len(colours)]
