"""Settings machinery and the core's settings: every setting declared once (name, type,
default, help).

Values come from, in rising precedence: the default, a YAML config file, environment variables
(``INFERLEDGER_<NAME>`` with dots turned into underscores), and CLI flags. Every value is
validated at start-up; a bad one raises :class:`SettingsError` whose message is one line naming
the setting and where the bad value came from. The product's whole registry is assembled in
``inferledger/settings.py``; docs/configuration.md is generated from it (``inferledger settings
--markdown``) and a test fails when a setting is undocumented.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from inferledger.core.errors import SettingsError
from inferledger.core.yaml_files import read_yaml_file

ENV_PREFIX = "INFERLEDGER_"


@dataclass(frozen=True)
class ScrapeTarget:
    """One Prometheus-text endpoint scraped on a schedule."""

    name: str
    url: str
    interval_s: float
    timeout_s: float
    kind: str  # "vllm", "dcgm" or "prometheus" (anything else in the text format)
    deployment: str | None = None


def _parse_bool(raw: Any) -> bool:
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in {"1", "true", "yes", "on"}:
        return True
    if text in {"0", "false", "no", "off"}:
        return False
    raise ValueError(f"expected true or false, got {raw!r}")


def _int_range(lo: int, hi: int) -> Callable[[Any], int]:
    def parse(raw: Any) -> int:
        if isinstance(raw, bool):
            raise ValueError(f"expected an integer, got {raw!r}")
        try:
            value = int(str(raw).strip().replace("_", ""))
        except ValueError:
            raise ValueError(f"expected an integer, got {raw!r}") from None
        if not lo <= value <= hi:
            raise ValueError(f"expected an integer from {lo} to {hi}, got {value}")
        return value

    return parse


def _float_range(lo: float, hi: float) -> Callable[[Any], float]:
    def parse(raw: Any) -> float:
        if isinstance(raw, bool):
            raise ValueError(f"expected a number, got {raw!r}")
        try:
            value = float(str(raw).strip())
        except ValueError:
            raise ValueError(f"expected a number, got {raw!r}") from None
        if not lo <= value <= hi:
            raise ValueError(f"expected a number from {lo:g} to {hi:g}, got {value:g}")
        return value

    return parse


def _choice(*options: str) -> Callable[[Any], str]:
    def parse(raw: Any) -> str:
        value = str(raw).strip().lower()
        if value not in options:
            raise ValueError(f"expected one of {', '.join(options)}, got {raw!r}")
        return value

    return parse


def _text(raw: Any) -> str:
    if not isinstance(raw, str | int | float) or isinstance(raw, bool):
        raise ValueError(f"expected text, got {raw!r}")
    return str(raw)


def _host(raw: Any) -> str:
    value = _text(raw).strip()
    if not value or any(ch.isspace() for ch in value):
        raise ValueError(f"expected a host name or address, got {raw!r}")
    return value


def _path(raw: Any) -> str:
    value = _text(raw).strip()
    if not value:
        raise ValueError("expected a file path, got an empty value")
    return value


def _key_list(raw: Any) -> tuple[str, ...]:
    """Ingest keys: a YAML list, or a comma-separated string from env/CLI."""
    if raw is None or raw == "":
        return ()
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list | tuple):
        raise ValueError(f"expected a list of keys, got {raw!r}")
    keys = tuple(str(k).strip() for k in items if str(k).strip())
    for key in keys:
        if len(key) < 8:
            raise ValueError("every ingest key must be at least 8 characters long")
    return keys


def _secret(raw: Any) -> str:
    """A signing key: empty (generate one) or at least 32 characters."""
    value = _text(raw).strip()
    if value and len(value) < 32:
        raise ValueError(f"expected at least 32 characters, got {len(value)}")
    return value


def _issuer(raw: Any) -> str:
    """An OIDC issuer URL: https, or http on loopback (a provider on the same machine)."""
    from urllib.parse import urlsplit

    value = _text(raw).strip().rstrip("/")
    if not value:
        return ""
    try:
        url = urlsplit(value)
    except ValueError:
        raise ValueError(f"expected an https:// URL, got {raw!r}") from None
    local = url.hostname in ("localhost", "127.0.0.1", "::1")
    if url.scheme != "https" and not (url.scheme == "http" and local):
        raise ValueError(f"expected an https:// URL (http only for localhost), got {raw!r}")
    if not url.hostname or url.query or url.fragment:
        raise ValueError(f"expected an issuer URL without query or fragment, got {raw!r}")
    return value


def _public_url(raw: Any) -> str:
    """The URL users open: http(s)://host[:port], no path, query or fragment."""
    from urllib.parse import urlsplit

    value = _text(raw).strip().rstrip("/")
    if not value:
        return ""
    try:
        url = urlsplit(value)
        url.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise ValueError(f"expected an http(s):// URL, got {raw!r}") from None
    if url.scheme not in ("http", "https") or not url.hostname:
        raise ValueError(f"expected an http(s):// URL, got {raw!r}")
    if url.path or url.query or url.fragment or url.username or url.password:
        raise ValueError(f"expected scheme://host[:port] only (no path or query), got {raw!r}")
    return value


_TARGET_KINDS = ("vllm", "dcgm", "prometheus")


def _targets(raw: Any) -> tuple[ScrapeTarget, ...]:
    """Scrape targets: a YAML list of mappings, or ``name=url,name=url`` from env/CLI."""
    if raw is None or raw == "":
        return ()
    if isinstance(raw, str):
        entries: list[Any] = []
        for part in raw.split(","):
            name, sep, url = part.strip().partition("=")
            if not sep:
                raise ValueError(f"expected name=url pairs separated by commas, got {part!r}")
            entries.append({"name": name.strip(), "url": url.strip()})
    elif isinstance(raw, list | tuple):
        entries = list(raw)
    else:
        raise ValueError(f"expected a list of targets, got {raw!r}")
    seen: set[str] = set()
    out = []
    for i, entry in enumerate(entries):
        if isinstance(entry, ScrapeTarget):
            entry = {f: getattr(entry, f) for f in ScrapeTarget.__dataclass_fields__}
        if not isinstance(entry, Mapping):
            raise ValueError(f"target #{i + 1}: expected a mapping with name and url")
        unknown = set(entry) - {"name", "url", "interval_s", "timeout_s", "kind", "deployment"}
        if unknown:
            raise ValueError(f"target #{i + 1}: unknown field(s) {', '.join(sorted(unknown))}")
        name = str(entry.get("name") or "").strip()
        url = str(entry.get("url") or "").strip()
        if not name or not url:
            raise ValueError(f"target #{i + 1}: name and url are required")
        if name in seen:
            raise ValueError(f"target name {name!r} is used twice")
        seen.add(name)
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"target {name!r}: url must start with http:// or https://")
        interval = _float_range(1, 86400)(entry.get("interval_s", 15))
        timeout = _float_range(0.1, 300)(entry.get("timeout_s", min(10.0, interval)))
        if timeout > interval:
            raise ValueError(f"target {name!r}: timeout_s ({timeout:g}) exceeds interval_s")
        kind = str(entry.get("kind") or _guess_kind(name, url))
        if kind not in _TARGET_KINDS:
            raise ValueError(f"target {name!r}: kind must be one of {', '.join(_TARGET_KINDS)}")
        deployment = entry.get("deployment")
        out.append(
            ScrapeTarget(
                name, url, interval, timeout, kind, str(deployment) if deployment else None
            )
        )
    return tuple(out)


def _guess_kind(name: str, url: str) -> str:
    text = f"{name} {url}".lower()
    if "dcgm" in text or ":9400" in text:
        return "dcgm"
    if "vllm" in text or ":8000" in text:
        return "vllm"
    return "prometheus"


@dataclass(frozen=True)
class Setting:
    name: str
    default: Any
    help: str
    parse: Callable[[Any], Any]
    cli_flag: str | None = None  # e.g. "--db"; settings without a flag are set by file or env
    metavar: str = "VALUE"

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper().replace(".", "_")


CORE_SETTINGS: tuple[Setting, ...] = (
    Setting("db", "inferledger.duckdb", "Path of the DuckDB database file.", _path, "--db", "PATH"),
    Setting("host", "127.0.0.1", "Address the HTTP server listens on.", _host, "--host", "HOST"),
    Setting(
        "port",
        8050,
        "Port of the one HTTP listener (UI, ingest, health, metrics).",
        _int_range(1, 65535),
        "--port",
        "N",
    ),
    Setting(
        "otlp_port",
        0,
        "Optional second listener for the OTLP default port (4318); 0 disables it.",
        _int_range(0, 65535),
        "--otlp-port",
        "N",
    ),
    Setting(
        "threads", 8, "Worker threads of the HTTP server.", _int_range(1, 256), "--threads", "N"
    ),
    Setting(
        "http.connection_limit",
        1000,
        "Most open client connections; at the limit, connections that have sent no complete "
        "request header are closed oldest first (the open-files limit is raised to fit).",
        _int_range(10, 100_000),
    ),
    Setting(
        "http.header_timeout_s",
        10.0,
        "Seconds a connection may stay idle, and a request's header may take from its first "
        "byte; past it an idle connection is closed, a partial request answered 408.",
        _float_range(0.1, 3600),
    ),
    Setting(
        "http.request_timeout_s",
        120.0,
        "Seconds a whole request (header and body) may take to arrive; past it, 408.",
        _float_range(0.1, 86_400),
    ),
    Setting(
        "ingest.keys",
        (),
        "Ingest keys accepted by /v1/traces and /v1/outcomes (Authorization: Bearer KEY or "
        "X-InferLedger-Key). Empty: no key is required. A list in YAML, comma-separated in env.",
        _key_list,
    ),
    Setting(
        "ingest.max_body_bytes",
        64 * 1024 * 1024,
        "Largest accepted request body, measured after decompression; larger gets 413.",
        _int_range(1024, 2**34),
    ),
    Setting(
        "ingest.queue_max_spans",
        500_000,
        "Spans accepted but not yet written at most; beyond that /v1/traces answers 503 + "
        "Retry-After (and so does /v1/outcomes while the writer is that far behind).",
        _int_range(1000, 100_000_000),
    ),
    Setting(
        "ingest.queue_max_bytes",
        256 * 1024 * 1024,
        "Bytes of decoded spans accepted but not yet written at most (what large attributes such "
        "as prompts cost in memory), and, separately, bytes of /v1/traces bodies being read and "
        "decoded at once (about twice their size); beyond either /v1/traces answers 503 + "
        "Retry-After. Ingest holds at most about twice this in memory.",
        _int_range(1024 * 1024, 2**40),
    ),
    Setting(
        "ingest.write_attempts",
        5,
        "Attempts to write one accepted request (pauses of 0.5 s, 1 s, 2 s... between) before "
        "it is moved to the spool's failed/ folder so the requests behind it keep flowing.",
        _int_range(1, 100),
    ),
    Setting(
        "ingest.spool_dir",
        "",
        "Folder of the durable spool of accepted requests not yet written to the database; "
        "empty: the database path plus '.spool'.",
        _text,
    ),
    Setting("ingest.retry_after_s", 1, "Retry-After seconds sent with a 503.", _int_range(1, 3600)),
    Setting(
        "storage.read_timeout_s",
        30.0,
        "Time limit of every read query; a slower query is interrupted.",
        _float_range(0.1, 3600),
    ),
    Setting("storage.memory_limit", "2GB", "DuckDB memory_limit for the whole process.", _text),
    Setting(
        "storage.threads",
        2,
        "DuckDB worker threads.",
        _int_range(1, 256),
    ),
    Setting(
        "storage.checkpoint_threshold",
        "256MB",
        "WAL size at which DuckDB folds the log into the database file. Larger means fewer, "
        "bigger checkpoints (faster ingest) and a longer log replay after a crash.",
        _text,
    ),
    Setting(
        "scrape.targets",
        (),
        "Prometheus-text endpoints to scrape: a YAML list of {name, url, interval_s, timeout_s, "
        "kind, deployment}; in env, name=url pairs separated by commas. kind is vllm, dcgm or "
        "prometheus (guessed from name/url when absent).",
        _targets,
    ),
    Setting(
        "scrape.max_bytes",
        16 * 1024 * 1024,
        "Largest scrape response accepted; a bigger one is recorded as a failed scrape.",
        _int_range(1024, 2**31),
    ),
    Setting(
        "prices.file",
        "",
        "Price seed file (YAML or CSV) loaded into an empty price book at start; empty: the "
        "bundled models/data/prices.yaml.",
        _text,
    ),
    Setting(
        "ledger.refresh_interval_s",
        60,
        "Seconds between refreshes of the cost marts (only hours whose inputs changed are "
        "recomputed); 0 disables the scheduled refresh (`inferledger refresh` still works).",
        _int_range(0, 86400),
    ),
    Setting(
        "ledger.max_scrape_gap_s",
        300,
        "A successful scrape of a replica counts as up time until the next scrape, at most "
        "this many seconds after it (Prometheus's staleness period).",
        _int_range(1, 86400),
    ),
    Setting(
        "alerts.file",
        "",
        "Budgets, alert rules and channels as code (YAML; docs/alerts.md): loaded at every "
        "start, replacing the file's earlier entries; the UI shows them and does not edit them. "
        "Empty: none from a file.",
        _text,
    ),
    Setting(
        "alerts.interval_s",
        60,
        "Seconds between evaluations of budgets and alert rules on the scheduler; 0 disables "
        "evaluation and delivery.",
        _int_range(0, 86400),
    ),
    Setting(
        "alerts.catch_up_s",
        3600,
        "After a restart, evaluation instants missed while the server was down are evaluated, "
        "going back at most this many seconds.",
        _int_range(0, 7 * 86400),
    ),
    Setting(
        "auth.enabled",
        True,
        "Require sign-in for the UI (local users: `inferledger users`; docs/security.md). "
        "false: anyone who reaches the port uses the UI as an admin. Ingest endpoints keep "
        "their own keys (ingest.keys) either way.",
        _parse_bool,
    ),
    Setting(
        "auth.session_secret",
        "",
        "Key that signs session cookies, at least 32 characters. Empty: a random key is "
        "generated once and kept in the database, so sessions survive restarts. Changing it "
        "signs everyone out.",
        _secret,
    ),
    Setting(
        "auth.session_hours",
        12,
        "Hours a sign-in lasts; then the user signs in again.",
        _int_range(1, 720),
    ),
    Setting(
        "auth.public_url",
        "",
        "The URL users open, e.g. https://ledger.example.com (the reverse proxy's). Used for "
        "the OIDC redirect URI and, when https, to mark the session cookie Secure. Empty: "
        "taken from each request.",
        _public_url,
    ),
    Setting(
        "auth.cookie_secure",
        "auto",
        "Mark the session cookie Secure (sent over HTTPS only): auto (when auth.public_url is "
        "https or the request came over TLS), true or false.",
        _choice("auto", "true", "false"),
    ),
    Setting(
        "auth.lockout_failures",
        5,
        "Failed sign-ins for one user name (from any address) before the name is locked "
        "for auth.lockout_s.",
        _int_range(1, 1000),
    ),
    Setting(
        "auth.lockout_s",
        60,
        "Seconds a user name stays locked after auth.lockout_failures failed sign-ins; "
        "doubles with each further failure, up to auth.lockout_max_s.",
        _int_range(1, 86400),
    ),
    Setting(
        "auth.lockout_max_s",
        900,
        "Longest lock of a user name, in seconds.",
        _int_range(1, 86400),
    ),
    Setting(
        "auth.failed_sign_ins_per_minute",
        20,
        "Failed sign-ins the server answers per minute across all user names and addresses; "
        "past it every password sign-in is refused (429) until the minute's oldest ages out.",
        _int_range(1, 100_000),
    ),
    Setting(
        "auth.oidc_issuer",
        "",
        "Optional OpenID Connect provider (issuer URL, https; http only for localhost). Set, "
        "the sign-in page offers 'Sign in with <issuer>' (authorization code flow with PKCE); "
        "its email claim names the local user, a new one is a viewer.",
        _issuer,
    ),
    Setting(
        "auth.oidc_client_id",
        "",
        "Client id registered at the OIDC provider (required with auth.oidc_issuer); the "
        "redirect URI to register is <server URL>/login/oidc/callback.",
        _text,
    ),
    Setting(
        "auth.oidc_client_secret",
        "",
        "Client secret from the OIDC provider; empty for a public client (PKCE only).",
        _text,
    ),
    # The SQL console (issue #14; ledger/console.py, docs/sql-console.md).
    Setting(
        "console.timeout_s",
        10.0,
        "Seconds one SQL console query may run; it is interrupted then, and its worker "
        "killed and replaced if it does not stop a few seconds later.",
        _float_range(0.1, 600),
    ),
    Setting(
        "console.max_rows",
        10_000,
        "Rows a console result holds at most (and so its downloads); the result says when "
        "it was cut.",
        _int_range(1, 1_000_000),
    ),
    Setting(
        "console.max_result_mb",
        32,
        "MiB of Arrow data a console result holds at most.",
        _int_range(1, 1024),
    ),
    Setting(
        "console.memory_limit",
        "512MB",
        "DuckDB memory_limit of each console worker process (nothing spills to disk).",
        _text,
    ),
    Setting(
        "console.workers",
        2,
        "Console worker processes: queries run one per worker at a time, the rest queue.",
        _int_range(1, 16),
    ),
    Setting(
        "console.queue_wait_s",
        30.0,
        "Seconds a console query waits for a free worker before it is refused as busy.",
        _float_range(0.1, 600),
    ),
    Setting(
        "console.snapshot_max_age_s",
        300.0,
        "Seconds after which the console's snapshot of the analyst views is rebuilt "
        "(in the background, at the next query).",
        _float_range(1, 86_400),
    ),
    Setting(
        "console.snapshot_path",
        "",
        "The console's snapshot file (default: the database path + .snapshot.duckdb).",
        _text,
    ),
    Setting(
        "console.history_size",
        100,
        "Console queries kept in each user's history.",
        _int_range(1, 10_000),
    ),
    Setting(
        "log_level",
        "info",
        "Log level: debug, info, warning or error.",
        _choice("debug", "info", "warning", "error"),
        "--log-level",
        "LEVEL",
    ),
)


class Registry:
    """A set of declared settings. The core declares its own (:data:`CORE_SETTINGS`); a layer
    above adds the settings whose values are its own types (the composition root adds
    ``deployments``, parsed by models), so this module imports nothing of ours."""

    def __init__(self, settings: tuple[Setting, ...]) -> None:
        self.settings = settings
        self.by_name = {s.name: s for s in settings}
        if len(self.by_name) != len(settings):
            raise SettingsError("a setting is declared twice")

    def lookup(self, name: str) -> Setting:
        try:
            return self.by_name[name]
        except KeyError:
            raise SettingsError(f"unknown setting {name!r}") from None

    def load(
        self,
        config_file: str | Path | None = None,
        cli: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Settings:
        """Merge default < file < env < CLI, validating each value where it came from."""
        env = os.environ if env is None else env
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        file_values = self.load_config_file(config_file) if config_file else {}
        for setting in self.settings:
            value = setting.parse(setting.default)
            source = "default"
            if setting.name in file_values:
                source = f"config file {config_file}"
                value = _validate(setting, file_values[setting.name], source)
            if setting.env_var in env:
                source = f"environment variable {setting.env_var}"
                value = _validate(setting, env[setting.env_var], source)
            if cli and cli.get(setting.name) is not None:
                source = f"flag {setting.cli_flag}"
                value = _validate(setting, cli[setting.name], source)
            values[setting.name] = value
            sources[setting.name] = source
        env_vars = {s.env_var for s in self.settings}
        for name in env:
            if name.startswith(ENV_PREFIX) and name not in env_vars:
                if name in {"INFERLEDGER_CONFIG"}:
                    continue
                raise SettingsError(f"unknown environment variable {name} (no such setting)")
        return Settings(MappingProxyType(values), MappingProxyType(sources), self)

    def load_config_file(self, path: str | Path) -> dict[str, Any]:
        p = Path(path)
        doc = read_yaml_file(p, f"config file {str(p)!r}", SettingsError)
        if doc is None:
            return {}
        if not isinstance(doc, Mapping):
            raise SettingsError(f"config file {str(p)!r} must hold a mapping of settings")
        flat = self._flatten(doc)
        for name in flat:
            if name not in self.by_name:
                raise SettingsError(f"config file {str(p)!r}: unknown setting {name!r}")
        return flat

    def _flatten(self, doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
        """YAML may nest (ingest: {keys: [...]}) or use dotted names; both mean the same."""
        flat: dict[str, Any] = {}
        for key, value in doc.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping) and name not in self.by_name:
                flat.update(self._flatten(value, name + "."))
            else:
                flat[name] = value
        return flat

    def markdown(self) -> str:
        """docs/configuration.md's settings table, generated from the registry."""
        lines = [
            "| Setting | Environment variable | Flag | Default | Meaning |",
            "|---|---|---|---|---|",
        ]
        for s in self.settings:
            default = s.default if s.default not in ((), "") else "(empty)"
            lines.append(
                f"| `{s.name}` | `{s.env_var}` | {f'`{s.cli_flag}`' if s.cli_flag else '–'} "
                f"| `{default}` | {s.help} |"
            )
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Settings:
    """Validated settings; read with ``settings["name"]`` or ``settings.get("name")``."""

    values: Mapping[str, Any]
    sources: Mapping[str, str] = field(default_factory=dict)
    registry: Registry | None = field(default=None, compare=False, repr=False)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str) -> Any:
        return self.values[name]

    def replace(self, **overrides: Any) -> Settings:
        """A copy with some values replaced (keys use underscores for dots: ingest__keys)."""
        if self.registry is None:
            raise SettingsError("these settings were not loaded from a registry")
        merged = dict(self.values)
        for key, raw in overrides.items():
            name = key.replace("__", ".")
            merged[name] = _validate(self.registry.lookup(name), raw, "override")
        return Settings(MappingProxyType(merged), self.sources, self.registry)


def _validate(setting: Setting, raw: Any, source: str) -> Any:
    try:
        return setting.parse(raw)
    except ValueError as exc:
        raise SettingsError(f"setting {setting.name!r} (from {source}): {exc}") from None
