"""The analyst view catalog (issue #14): which views analysts query, snapshot and export.

Being written: the catalog's metadata (grain, columns, units, examples) lands here.
"""

from __future__ import annotations

#: The analyst-facing views of sql/views/ (staging views stay internal).
ANALYST_VIEWS: tuple[str, ...] = (
    "request_costs",
    "spend_hourly",
    "spend_daily",
    "spend_totals",
    "unpriced_requests",
    "prices_effective",
    "deployment_replicas",
    "task_outcomes",
    "task_outcome_decisions",
    "outcome_economics",
    "false_economy_findings",
    "cache_efficiency",
    "cache_by_app",
    "kv_cache_hourly",
    "latency_stages",
    "slo_attainment",
    "metric_counter_increases",
    "metric_histogram_quantiles",
    "spans_by_service",
    "ingest_summary",
    "scrape_health",
)
