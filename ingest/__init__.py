"""Ingest: turns OTLP traces and Prometheus text into rows."""
