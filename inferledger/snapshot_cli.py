"""`inferledger snapshot` (issue #14): being written."""

from __future__ import annotations

import argparse


def add_parser(sub: argparse._SubParsersAction) -> None:
    """Add the `snapshot` command to the CLI (not yet)."""


def run(args: argparse.Namespace) -> int:
    raise NotImplementedError("snapshot")
