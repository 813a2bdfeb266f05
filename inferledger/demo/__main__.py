"""`python -m inferledger.demo ...`: the same as `inferledger demo ...`, through the same CLI
(its parser, its one-line errors). Only `python -m` runs this module and nothing imports it,
so the CLI importing the demo package is no cycle."""

import sys

from inferledger.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
