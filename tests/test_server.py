"""`inferledger serve` as one process: health, readiness, own metrics, the UI shell."""

from __future__ import annotations

import requests

from inferledger.fixtures import make_export_request


def test_health_ready_and_metrics(live) -> None:
    assert requests.get(live.url + "/healthz", timeout=5).text == "ok\n"
    assert requests.get(live.url + "/readyz", timeout=5).status_code == 200
    body = make_export_request(3).SerializeToString()
    requests.post(
        live.url + "/v1/traces",
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert live.storage.scalar("select count(*) from spans") == 3  # waits for the writer
    text = requests.get(live.url + "/metrics", timeout=5).text
    for name in (
        "inferledger_spans_accepted_total 3.0",
        'inferledger_http_requests_total{endpoint="/v1/traces",status="200"} 1.0',
        "inferledger_http_request_duration_seconds_bucket",
        "inferledger_write_queue_depth 0.0",
        "inferledger_duckdb_size_bytes",
        "inferledger_write_commit_duration_seconds_count",
    ):
        assert name in text, name


def test_readyz_fails_while_stopping(live) -> None:
    live.service.ready.clear()
    resp = requests.get(live.url + "/readyz", timeout=5)
    assert resp.status_code == 503
    live.service.ready.set()


def test_dash_shell_is_served(live) -> None:
    resp = requests.get(live.url + "/", timeout=10)
    assert resp.status_code == 200
    assert "<title>InferLedger</title>" in resp.text
    assert "_dash-renderer" in resp.text or "dash_renderer" in resp.text


def test_second_listener_on_otlp_port(live_factory) -> None:
    from tests.conftest import free_port

    otlp = free_port()
    live = live_factory(otlp_port=otlp)
    body = make_export_request(4).SerializeToString()
    resp = requests.post(
        f"http://127.0.0.1:{otlp}/v1/traces",
        data=body,
        headers={"Content-Type": "application/x-protobuf"},
        timeout=10,
    )
    assert resp.status_code == 200
    assert live.storage.scalar("select count(*) from spans") == 4


def test_cli_serve_refuses_a_newer_database(server_factory, tmp_path) -> None:
    from inferledger.core.storage import Storage

    db = tmp_path / "future.duckdb"
    with Storage(db) as st:
        st.execute_write("INSERT INTO schema_migrations (version, name) VALUES (999, 'future')")
    srv = server_factory(db=db, start=False)
    import subprocess
    import sys

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferledger.cli",
            "serve",
            "--db",
            str(db),
            "--port",
            str(srv.port),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=srv.env,
    )
    assert proc.returncode == 2
    assert "schema version 999, newer than this InferLedger supports" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
