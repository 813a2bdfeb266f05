"""Building OTLP protobuf attributes, shared by everything that emits spans (the simulator's
engine spans, the workload's app spans, the test and benchmark fixtures)."""

from __future__ import annotations

from typing import Any


def add_attribute(attrs: Any, key: str, value: object) -> None:
    """Append ``key = value`` to a repeated KeyValue field, typed as OTLP types it: bool, int
    (int64), float (double), anything else as a string."""
    kv = attrs.add()
    kv.key = key
    if isinstance(value, bool):
        kv.value.bool_value = value
    elif isinstance(value, int):
        kv.value.int_value = value
    elif isinstance(value, float):
        kv.value.double_value = value
    else:
        kv.value.string_value = str(value)
