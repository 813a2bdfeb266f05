"""InferLedger's own Prometheus metrics, served on GET /metrics.

Each service instance owns a private CollectorRegistry (never the global one), so tests that
start several apps in one process do not collide.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

HTTP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class ServiceMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.spans_accepted = Counter(
            "inferledger_spans_accepted", "Spans committed to storage.", registry=r
        )
        self.spans_duplicate = Counter(
            "inferledger_spans_duplicate",
            "Spans received again (same trace_id and span_id) and not stored twice.",
            registry=r,
        )
        self.spans_rejected = Counter(
            "inferledger_spans_rejected",
            "Spans refused, by reason (invalid span, undecodable body, auth, size, overload).",
            ["reason"],
            registry=r,
        )
        self.ingest_quarantined = Counter(
            "inferledger_ingest_requests_quarantined",
            "Accepted OTLP requests that could not be written after bounded retries (or replayed)"
            " and were moved to the spool's failed/ folder.",
            registry=r,
        )
        self.http_requests = Counter(
            "inferledger_http_requests",
            "HTTP requests answered by the ingest and health endpoints.",
            ["endpoint", "status"],
            registry=r,
        )
        self.http_latency = Histogram(
            "inferledger_http_request_duration_seconds",
            "Time to answer an ingest or health request.",
            ["endpoint"],
            buckets=HTTP_BUCKETS,
            registry=r,
        )
        self.http_connections_closed = Counter(
            "inferledger_http_connections_closed",
            "Client connections closed by the HTTP deadlines: idle, header_timeout and "
            "request_timeout (too slow), shed (closed to make room at the connection limit).",
            ["reason"],
            registry=r,
        )
        self.sign_ins = Counter(
            "inferledger_sign_ins",
            "Password sign-ins by result: ok, failed (wrong name or password, disabled), "
            "refused_account (user name locked) and refused_server (too many failures on the "
            "server); refused ones check no password (docs/security.md).",
            ["result"],
            registry=r,
        )
        self.write_queue_depth = Gauge(
            "inferledger_write_queue_depth",
            "Units (spans, samples) accepted and waiting for the single writer.",
            registry=r,
        )
        self.write_commit_seconds = Histogram(
            "inferledger_write_commit_duration_seconds",
            "Time of one group commit of the storage writer.",
            buckets=HTTP_BUCKETS,
            registry=r,
        )
        self.scrapes = Counter(
            "inferledger_scrapes",
            "Scrapes of Prometheus-text targets, by target and result (ok or error).",
            ["target", "result"],
            registry=r,
        )
        self.scrape_duration = Histogram(
            "inferledger_scrape_duration_seconds",
            "Duration of one scrape including parsing and storing.",
            ["target"],
            buckets=HTTP_BUCKETS,
            registry=r,
        )
        self.scrape_samples = Gauge(
            "inferledger_scrape_samples",
            "Samples stored by the last successful scrape of each target.",
            ["target"],
            registry=r,
        )
        self.scrape_samples_dropped = Counter(
            "inferledger_scrape_samples_dropped",
            "Scraped samples not stored while the rest of their scrape was, by target and reason "
            "(timestamp_out_of_bounds, counter_not_finite, counter_negative).",
            ["target", "reason"],
            registry=r,
        )
        self.target_up = Gauge(
            "inferledger_scrape_target_up",
            "1 if the last scrape succeeded.",
            ["target"],
            registry=r,
        )
        self.ledger_failed_hours = Gauge(
            "inferledger_ledger_failed_hours",
            "Hours whose cost marts the last ledger refresh could not recompute (each is logged "
            "and retried on the next refresh; the other hours and the watermarks move on).",
            registry=r,
        )
        self.db_size_bytes = Gauge(
            "inferledger_duckdb_size_bytes", "Size of the DuckDB file plus WAL.", registry=r
        )

    def bind_gauges(self, queue_depth: Callable[[], int], db_size: Callable[[], int]) -> None:
        """Gauges read at scrape time from the live objects they describe."""
        self.write_queue_depth.set_function(queue_depth)
        self.db_size_bytes.set_function(db_size)

    def render(self) -> bytes:
        return generate_latest(self.registry)
