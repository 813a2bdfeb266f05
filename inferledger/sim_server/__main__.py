"""`python -m inferledger.sim_server [simulate flags] [serve flags]`: the same as
`inferledger simulate --serve ...`, without going through the CLI's command list."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from inferledger import simulate
from inferledger.core.errors import InferLedgerError, SettingsError
from inferledger.sim_server import serve_options_from_scenario, serve_simulation


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the flags as `inferledger simulate --serve` would, and serve."""
    parser = argparse.ArgumentParser(prog="python -m inferledger.sim_server")
    simulate.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["simulate", *(sys.argv[1:] if argv is None else argv)])
    try:
        return serve_simulation(
            serve_options_from_scenario(args, simulate.scenario_from_args(args))
        )
    except SettingsError as exc:
        print(f"inferledger: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except InferLedgerError as exc:
        print(f"inferledger: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
