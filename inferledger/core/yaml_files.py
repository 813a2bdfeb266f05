"""Reading YAML the user hands us (config, scenario, workload files) with one-line errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from inferledger.core.errors import InferLedgerError


def parse_yaml(text: str, where: str, error: type[InferLedgerError]) -> Any:
    """Parse YAML text; a syntax error raises ``error`` naming ``where`` and the line."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise error(f"{where} is not valid YAML{at}") from None
    except ValueError as exc:
        # PyYAML builds dates while parsing: `2026-13-01` fails with a bare ValueError.
        raise error(f"{where} is not valid YAML: {exc}") from None


def read_yaml_file(path: str | Path, where: str, error: type[InferLedgerError]) -> Any:
    """Read and parse a YAML file; an unreadable file or bad YAML raises ``error`` in one line
    that starts with ``where`` (e.g. "config file 'x.yaml'")."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{where}: {exc.strerror or exc}") from None
    return parse_yaml(text, where, error)
