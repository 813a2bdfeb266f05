"""The product's settings registry: the core's settings plus those whose values are types of a
layer above the core (``deployments``, parsed by ``models.deployment_config``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inferledger.core.settings import CORE_SETTINGS, Registry, Setting, Settings
from ledger.scheduled_exports import parse_memory_limit, parse_schedules, parse_timeout
from models.deployment_config import parse_deployments

REGISTRY = Registry(
    (
        *CORE_SETTINGS,
        Setting(
            "deployments",
            (),
            "Deployments: a YAML list of {name, model, gpu_type, gpus_per_replica, "
            "tensor_parallel, idle_policy, environment}; scrape targets name their deployment "
            "(scrape.targets[].deployment). In env, a JSON list. See docs/deployments.md.",
            parse_deployments,
        ),
        # Exports of the analyst views (issue #14; ledger/exports.py, docs/exports.md).
        Setting(
            "exports.timeout_s",
            3600.0,
            "Seconds one export (CLI, download or scheduled) may run before it is stopped.",
            parse_timeout,
        ),
        Setting(
            "exports.memory_limit",
            "512MB",
            "DuckDB memory_limit of an `inferledger export` process (the server's exports use "
            "storage.memory_limit).",
            parse_memory_limit,
        ),
        Setting(
            "exports.schedules",
            (),
            "Scheduled exports: a YAML list of {name, views (a list or all), format, every "
            "(hourly or daily), folder, delay_s, catch_up}; each completed period's rows go to "
            "folder/VIEW/date=YYYY-MM-DD/[hour_utc=HH/]part.EXT with a manifest. In env, a JSON "
            "list. See docs/exports.md.",
            parse_schedules,
        ),
    )
)
SETTINGS = REGISTRY.settings


def load_settings(
    config_file: str | Path | None = None,
    cli: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> Settings:
    """Merge default < file < env < CLI over the whole registry (see core.settings)."""
    return REGISTRY.load(config_file, cli, env)


def settings_markdown() -> str:
    """docs/configuration.md's settings table."""
    return REGISTRY.markdown()


def load_config_file(path: str | Path) -> dict[str, Any]:
    """A config file's settings, flattened and checked against the registry."""
    return REGISTRY.load_config_file(path)
