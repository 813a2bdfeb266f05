"""SQL shipped with InferLedger: migrations, views, macros, ingest statements."""
