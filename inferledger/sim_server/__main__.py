"""`python -m inferledger.sim_server [simulate flags] [serve flags]`: the same as
`inferledger simulate --serve ...`, without going through the CLI's command list."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from inferledger import simulate
from inferledger.cli import report_errors
from inferledger.sim_server import serve_options_from_scenario, serve_simulation


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags as `inferledger simulate --serve` would, and serve."""
    parser = argparse.ArgumentParser(prog="python -m inferledger.sim_server")
    simulate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", *(sys.argv[1:] if argv is None else argv)])
    return report_errors(
        lambda: serve_simulation(
            serve_options_from_scenario(args, simulate.scenario_from_args(args))
        )
    )


if __name__ == "__main__":
    sys.exit(main())
