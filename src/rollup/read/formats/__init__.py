"""The trace formats decoded: OTLP protobuf (framed or bare), OTLP JSON (lines or one document, read by Python or by
DuckDB itself), their shapes and the Arrow columns they become."""
