"""The settings registry: precedence, validation with one-line errors, and docs coverage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from inferledger.core.errors import SettingsError
from inferledger.settings import SETTINGS, load_settings, settings_markdown

ROOT = Path(__file__).resolve().parent.parent


def test_defaults_are_valid() -> None:
    s = load_settings(env={})
    assert s["port"] == 8050
    assert s["ingest.max_body_bytes"] == 64 * 1024 * 1024
    assert s["scrape.targets"] == ()
    assert all(src == "default" for src in s.sources.values())


def test_precedence_file_env_cli(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text("port: 9000\nhost: 0.0.0.0\ningest:\n  keys: [file-key-123]\n")
    s = load_settings(cfg, cli={"port": "9100"}, env={"INFERLEDGER_HOST": "127.0.0.2"})
    assert s["port"] == 9100 and s.sources["port"] == "flag --port"
    assert s["host"] == "127.0.0.2"
    assert s.sources["host"] == "environment variable INFERLEDGER_HOST"
    assert s["ingest.keys"] == ("file-key-123",)


def test_scrape_targets_from_yaml_and_env(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        "scrape:\n  targets:\n"
        "    - {name: vllm-0, url: 'http://127.0.0.1:8000/metrics', interval_s: 5}\n"
        "    - {name: gpu, url: 'http://127.0.0.1:9400/metrics', kind: dcgm}\n"
    )
    s = load_settings(cfg, env={})
    a, b = s["scrape.targets"]
    assert (a.name, a.kind, a.interval_s, a.timeout_s) == ("vllm-0", "vllm", 5.0, 5.0)
    assert (b.kind, b.interval_s) == ("dcgm", 15.0)
    env = {"INFERLEDGER_SCRAPE_TARGETS": "x=http://127.0.0.1:1/metrics"}
    assert load_settings(env=env)["scrape.targets"][0].url == "http://127.0.0.1:1/metrics"


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"INFERLEDGER_PORT": "0"},
            "setting 'port' (from environment variable INFERLEDGER_PORT): "
            "expected an integer from 1 to 65535, got 0",
        ),
        ({"INFERLEDGER_THREADS": "many"}, "setting 'threads'"),
        ({"INFERLEDGER_INGEST_KEYS": "short"}, "at least 8 characters"),
        ({"INFERLEDGER_SCRAPE_TARGETS": "nourl"}, "expected name=url pairs"),
        ({"INFERLEDGER_SCRAPE_TARGETS": "a=ftp://x"}, "must start with http://"),
        ({"INFERLEDGER_LOG_LEVEL": "loud"}, "expected one of debug, info, warning, error"),
        ({"INFERLEDGER_NOPE": "1"}, "unknown environment variable INFERLEDGER_NOPE"),
    ],
)
def test_bad_values_name_the_setting(env: dict[str, str], message: str) -> None:
    with pytest.raises(SettingsError) as err:
        load_settings(env=env)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_config_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("port: [1, 2\n")
    with pytest.raises(SettingsError, match="not valid YAML at line"):
        load_settings(bad, env={})
    bad.write_text("- a\n- b\n")
    with pytest.raises(SettingsError, match="must hold a mapping"):
        load_settings(bad, env={})
    bad.write_text("prot: 80\n")
    with pytest.raises(SettingsError, match="unknown setting 'prot'"):
        load_settings(bad, env={})
    with pytest.raises(SettingsError, match="No such file"):
        load_settings(tmp_path / "missing.yaml", env={})


def test_cli_prints_one_line_and_exits_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "inferledger.cli", "serve", "--port", "http"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "inferledger: invalid configuration: setting 'port' (from flag --port): "
        "expected an integer, got 'http'"
    ]


def test_every_setting_is_documented() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    missing = [s.name for s in SETTINGS if f"`{s.name}`" not in doc or s.help not in doc]
    assert not missing, f"settings missing from docs/configuration.md: {missing}"
    assert settings_markdown() in doc, "regenerate: inferledger settings --markdown"


def test_settings_command_never_prints_secrets(capsys, monkeypatch):
    from inferledger.cli import main

    monkeypatch.setenv("INFERLEDGER_INGEST_KEYS", "sup3r-secret-key")
    monkeypatch.setenv("INFERLEDGER_AUTH_SESSION_SECRET", "an0ther-secret-value-that-is-long")
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    assert "sup3r-secret-key" not in out and "an0ther-secret" not in out
    assert "ingest.keys = '<redacted>'" in out
