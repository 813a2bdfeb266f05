"""The `inferledger` command line. Errors the user can fix print one line and exit 2."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from inferledger import __version__
from inferledger.errors import InferLedgerError, SettingsError
from inferledger.settings import SETTINGS, load_settings, settings_markdown


def _add_setting_flags(parser: argparse.ArgumentParser, names: Sequence[str]) -> None:
    parser.add_argument(
        "--config",
        metavar="FILE",
        help="YAML config file (default: $INFERLEDGER_CONFIG when set)",
    )
    for setting in SETTINGS:
        if setting.name in names and setting.cli_flag:
            parser.add_argument(
                setting.cli_flag,
                dest=setting.name,
                metavar=setting.metavar,
                help=f"{setting.help} [default: {setting.default}]",
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="inferledger",
        description="Cost-and-capacity analytics for teams that serve LLMs.",
    )
    parser.add_argument("--version", action="version", version=f"inferledger {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the dashboard, ingest endpoints and scheduler")
    _add_setting_flags(serve, ["db", "host", "port", "otlp_port", "threads", "log_level"])

    settings = sub.add_parser("settings", help="show the effective settings or their docs")
    _add_setting_flags(settings, [s.name for s in SETTINGS])
    settings.add_argument(
        "--markdown", action="store_true", help="print the settings table of the docs"
    )
    return parser


def _load(args: argparse.Namespace):
    config = args.config or os.environ.get("INFERLEDGER_CONFIG")
    cli = {s.name: getattr(args, s.name, None) for s in SETTINGS}
    return load_settings(config, cli)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "serve":
            settings = _load(args)
            from inferledger.server import serve

            return serve(settings)
        if args.command == "settings":
            if args.markdown:
                sys.stdout.write(settings_markdown())
                return 0
            loaded = _load(args)
            for setting in SETTINGS:
                print(
                    f"{setting.name} = {loaded[setting.name]!r}  ({loaded.sources[setting.name]})"
                )
            return 0
    except SettingsError as exc:
        print(f"inferledger: invalid configuration: {exc}", file=sys.stderr)
        return 2
    except InferLedgerError as exc:
        print(f"inferledger: {exc}", file=sys.stderr)
        return 2
    return 1


if __name__ == "__main__":
    sys.exit(main())
