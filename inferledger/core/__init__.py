"""The bottom layer: errors, settings machinery, the storage interface and its DuckDB backend,
YAML loading, service metrics and the HTTP server lifecycle. Imports nothing of ours."""
