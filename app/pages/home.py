"""Home: what InferLedger has received so far. Dashboards arrive with their own issues."""

from __future__ import annotations

import dash
from dash import html

from app import context

dash.register_page(__name__, path="/", name="Home", title="InferLedger")


def _stat(label: str, value: object) -> html.Div:
    return html.Div(
        [html.Div(label, className="stat-label"), html.Div(str(value), className="stat-value")],
        className="stat",
    )


def layout(**_kwargs: object) -> html.Div:
    storage = context.storage()
    summary = storage.query("select * from ingest_summary").row(0, named=True)
    services = storage.query("select * from spans_by_service limit 20")
    empty = summary["spans"] == 0
    return html.Div(
        [
            html.H1("Ingest status"),
            html.Div(
                [
                    _stat("Spans", f"{summary['spans']:,}"),
                    _stat("Traces", f"{summary['traces']:,}"),
                    _stat("Services", summary["services"]),
                    _stat("Newest span", summary["last_span_at"] or "–"),
                ],
                className="stats",
            ),
            html.P(
                "No spans yet. Point an OpenTelemetry exporter at POST /v1/traces "
                "(OTLP/HTTP, protobuf or JSON).",
                className="empty-state",
            )
            if empty
            else html.Table(
                [
                    html.Thead(
                        html.Tr(
                            [
                                html.Th("Service"),
                                html.Th("Spans"),
                                html.Th("Traces"),
                                html.Th("Newest span"),
                            ]
                        )
                    ),
                    html.Tbody(
                        [
                            html.Tr(
                                [
                                    html.Td(r["service_name"]),
                                    html.Td(f"{r['spans']:,}"),
                                    html.Td(f"{r['traces']:,}"),
                                    html.Td(str(r["last_span_at"])),
                                ]
                            )
                            for r in services.iter_rows(named=True)
                        ]
                    ),
                ],
                className="table",
            ),
        ]
    )
