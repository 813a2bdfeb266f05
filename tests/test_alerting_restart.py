"""Restart safety of notifications (issue #12), end to end: a real `inferledger serve` is
killed with SIGKILL after it recorded a notification and while it is sending it (the receiver
holds the request), then restarted. The receiver gets the notification again with the same
idempotency key, and no other: at least once, duplicates only under the same key."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from inferledger.core.storage import Storage
from inferledger.ledger_fixtures import S, unpriced_requests, watch_unpriced
from ledger.outbox import delivery_log, notifications
from tests.conftest import WebhookReceiver


def unpriced_ledger(db: Path, hook_url: str) -> None:
    """Three requests to a model with no price ten minutes ago, a webhook channel and an
    unpriced_usage rule that fires on them."""
    with Storage(db).open() as st:
        base = int((datetime.now(UTC) - timedelta(minutes=10)).timestamp()) * S
        unpriced_requests(st, base)
        watch_unpriced(st, hook_url, by="t", per_model=False)


def wait_for(condition, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.slow
def test_sigkill_while_sending_resends_with_the_same_key(server_factory, tmp_path) -> None:
    receiver = WebhookReceiver(hold_first=True)  # held while the sender is killed
    db = tmp_path / "alerts.duckdb"
    unpriced_ledger(db, receiver.url)
    env = {"INFERLEDGER_ALERTS_INTERVAL_S": "1"}
    try:
        first = server_factory(db=db, env=env)
        assert receiver.first.wait(30), f"no notification was sent:\n{first.log()}"
        first.kill()  # recorded, sent, not marked
        receiver.release.set()

        second = server_factory(db=db, env=env)
        assert wait_for(lambda: len(receiver.keys) >= 2, 30), second.log()
        time.sleep(3)  # a few more evaluations and dispatches: nothing new may arrive
        assert second.terminate() == 0
    finally:
        receiver.close()

    [key] = set(receiver.keys)
    assert receiver.keys == [key, key]  # one logical notification, redelivered once
    first_body, second_body = (body for _, body in receiver.received)
    assert first_body == second_body
    assert first_body["event"] == "firing" and first_body["rule"] == "unpriced"
    with Storage(db).open() as st:
        [sent] = notifications(st)
        assert (sent.idempotency_key, sent.state, sent.attempts) == (key, "sent", 1)
        assert [(d.ok, d.status_code) for d in delivery_log(st, limit=10)] == [(True, 200)]


def test_a_bad_alerts_file_stops_serve_with_one_line(tmp_path, monkeypatch, capsys) -> None:
    from inferledger.cli import main

    bad = tmp_path / "alerts.yaml"
    bad.write_text("rules:\n  - name: x\n    kind: nonsense\n")
    monkeypatch.setenv("INFERLEDGER_ALERTS_FILE", str(bad))
    rc = main(["serve", "--db", str(tmp_path / "x.duckdb"), "--port", "1"])  # never listens
    err = [line for line in capsys.readouterr().err.splitlines() if "Traceback" in line
           or line.startswith("inferledger:")]  # fmt: skip
    assert rc == 2
    assert len(err) == 1 and "alerts file" in err[0] and "nonsense" in err[0]
    # the database was closed again: it opens at once
    with Storage(tmp_path / "x.duckdb").open() as st:
        assert st.scalar("SELECT count(*) FROM alert_rules") == 0
