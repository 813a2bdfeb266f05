"""Randomised SIGKILL trials of alert evaluation and delivery (issue #12: 0 duplicate and 0
missed notifications over >= 200 trials).

A worker process (``--worker``) runs the real engine (ledger/alert_engine.py), outbox
(ledger/outbox.py) and dispatcher (inferledger/alerting.py) over a DuckDB file: crafted rules
(4 rules x 2 scopes, 2 webhook channels each, two with a pending period), whose values follow
a fixed script of breaches, escalations and recoveries over a simulated timeline stepped one
minute per evaluation. After each step it dispatches the outbox to a webhook receiver on
loopback (this process), which counts what arrives by idempotency key.

The driver kills the worker with SIGKILL at a random moment (evaluation, commit, send or mark,
whatever is running), restarts it on the same file, and repeats; a worker that reaches the
end of the timeline with an empty outbox ends the scenario and a new one starts on a fresh
file. Each received notification is identified logically by (rule, scope, alert start, event,
notification number, channel), from its body. At the end, against a reference run without kills:

- missed: logical notifications of the reference never received (must be 0);
- duplicates by key: logical notifications received under more than one idempotency key
  (must be 0);
- redeliveries: receipts of a key already received (allowed: at least once; the receiver
  drops them by key).

    .venv/bin/python bench/alert_crash.py                 # 200 trials
    .venv/bin/python bench/alert_crash.py --trials 300 --seed 7
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

T0 = datetime(2026, 3, 2, 12, 0, tzinfo=UTC)
STEP = timedelta(minutes=1)
STEPS = 60
RULES = 4
SCOPES = ('{"route":"/a"}', '{"route":"/b"}')
CHANNELS = ("alpha", "beta")


# ---------------------------------------------------------------- the scenario


def episodes(rule: int, scope: int) -> list[tuple[int, int, int]]:
    """(start step, end step, escalation step) of each breach of one rule x scope: fixed by
    the indices, so every run of the scenario sees the same values."""
    rng = random.Random(rule * 100 + scope)
    out, t = [], rng.randint(0, 10)
    while t < STEPS - 10:
        length = rng.randint(3, 20)
        out.append((t, t + length, t + rng.randint(1, length)))
        t += length + rng.randint(4, 15)
    return out


def value_at(rule: int, scope: int, step: int) -> tuple[float, str]:
    for start, end, escalate in episodes(rule, scope):
        if start <= step < end:
            return (40.0, "critical") if step >= escalate else (20.0, "warning")
    return 1.0, "warning"


def scenario_rules() -> list:
    from ledger.alert_engine import EngineRule
    from models.alert_config import AlertRule

    out = []
    for r in range(RULES):
        rule = AlertRule(
            name=f"rule-{r}",
            kind="failure_rate",
            owner="ops@example.com",
            window_s=300,
            threshold=10.0,
            resolve_threshold=5.0,
            pending_s=(0, 120)[r % 2],
            resolve_s=120,
            repeat_s=1200,
            group_by=("route",),
            channels=CHANNELS,
            rule_id=r + 1,
        )
        out.append(EngineRule(rule.key, rule))
    return out


def observe(rule, budget, at: datetime, cache: dict) -> list:
    from models.alert_lifecycle import Observation

    step = int((at - T0) / STEP)
    r = int(rule.rule_id) - 1
    out = []
    for s, key in enumerate(SCOPES):
        value, severity = value_at(r, s, step)
        out.append(
            Observation(
                scope_key=key,
                value=value,
                severity=severity,
                summary=f"{value}% failed",
                labels=json.loads(key),
            )
        )
    return out


def run_worker(db: str, url: str) -> int:
    """Evaluate every step not yet evaluated, dispatching after each, then drain the outbox.
    Resumes where the killed run left off: the cursors and the outbox are in the file."""
    from inferledger.alerting import Dispatcher
    from inferledger.core.storage import Storage
    from ledger.alert_engine import AlertEngine
    from ledger.outbox import due_notifications
    from models.alert_config import Channel

    channels = {
        name: Channel(name=name, kind="webhook", config={"url": f"{url}/{name}"})
        for name in CHANNELS
    }
    rules = scenario_rules()
    far = T0 + STEPS * STEP + timedelta(days=1)
    with Storage(db).open() as storage:
        print("ready", flush=True)  # the driver's kill clock starts here
        engine = AlertEngine(storage, observe=observe, rules=lambda: rules, interval_s=60)
        dispatcher = Dispatcher(storage, channels=lambda: channels, clock=lambda: far, timeout_s=5)
        for step in range(STEPS):
            at = T0 + step * STEP
            summary = engine.evaluate(at)
            if summary.errors:
                print(summary.errors, file=sys.stderr)
                return 2
            dispatcher.run_once(far, wait=True)
        while due_notifications(storage, far, 1):
            dispatcher.run_once(far, wait=True)
        dispatcher.close()
    return 0


# ---------------------------------------------------------------- the receiver


class Receiver:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.receipts: list[tuple[str, tuple]] = []  # (idempotency key, logical id)
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                logical = (
                    outer.run,
                    body["rule_key"],
                    json.dumps(body["scope"], sort_keys=True),
                    body["event"],
                    body["notification"],
                    body["channel"],
                    body["pending_since"],  # which alert of the rule x scope
                )
                with outer.lock:
                    outer.receipts.append((self.headers["Idempotency-Key"], logical))
                time.sleep(0.002)  # a little time in "send" for the kills to land in
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass

            def log_message(self, *args) -> None:
                pass

        self.run = 0
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


def reference(tmp: Path, receiver: Receiver) -> set[tuple]:
    """The logical notifications of a run without kills (the run id set to -1)."""
    receiver.run = -1
    db = tmp / "reference.duckdb"
    command = [sys.executable, __file__, "--worker", str(db), receiver.url]
    rc = subprocess.run(command, stdout=subprocess.DEVNULL).returncode
    if rc != 0:
        raise SystemExit(f"reference run failed ({rc})")
    with receiver.lock:
        found = {logical[1:] for _, logical in receiver.receipts if logical[0] == -1}
        receiver.receipts = [r for r in receiver.receipts if r[1][0] != -1]
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=200, help="SIGKILLs (default 200)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--max-delay", type=float, default=1.5, help="kill within this many seconds of ready"
    )
    parser.add_argument("--worker", nargs=2, metavar=("DB", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return run_worker(*args.worker)

    rng = random.Random(args.seed)
    receiver = Receiver()
    with tempfile.TemporaryDirectory(prefix="alert-crash-") as tmp_dir:
        tmp = Path(tmp_dir)
        expected = reference(tmp, receiver)
        print(
            f"reference run: {len(expected)} notifications "
            f"({RULES} rules x {len(SCOPES)} scopes x {len(CHANNELS)} channels, "
            f"{STEPS} steps)"
        )
        kills = runs = finished = 0
        started = time.perf_counter()
        env = {**os.environ, "PYTHONHASHSEED": "0"}
        while kills < args.trials:
            runs += 1
            receiver.run = runs
            db = tmp / f"run-{runs}.duckdb"
            while True:
                proc = subprocess.Popen(
                    [sys.executable, __file__, "--worker", str(db), receiver.url],
                    env=env,
                    stdout=subprocess.PIPE,
                )
                # One kill in ten lands while the worker starts (opening the file replays
                # the WAL of the last kill); the rest while it evaluates and delivers.
                if rng.random() < 0.1:
                    delay = rng.uniform(0.0, 1.0)
                else:
                    assert proc.stdout is not None
                    ready, _, _ = select.select([proc.stdout], [], [], 60)
                    if not ready or proc.stdout.readline().strip() != b"ready":
                        proc.wait(60)
                        if proc.returncode not in (None, 0):
                            raise SystemExit(f"worker failed with {proc.returncode}")
                    delay = rng.uniform(0.0, args.max_delay)
                try:
                    rc = proc.wait(delay)
                except subprocess.TimeoutExpired:
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    kills += 1
                    continue
                finally:
                    if proc.stdout is not None:
                        proc.stdout.close()
                if rc != 0:
                    raise SystemExit(f"worker failed with {rc} in run {runs}")
                finished += 1
                break
        seconds = time.perf_counter() - started

    per_run_expected = {(run, *e) for run in range(1, runs + 1) for e in expected}
    by_logical: dict[tuple, set[str]] = defaultdict(set)
    for key, logical in receiver.receipts:
        by_logical[logical].add(key)
    received = set(by_logical)
    missed = per_run_expected - received
    unexpected = received - per_run_expected
    dup_keys = sum(1 for keys in by_logical.values() if len(keys) > 1)
    counts = Counter((logical[0], key) for key, logical in receiver.receipts)
    redeliveries = sum(n - 1 for n in counts.values())
    print(
        f"trials (SIGKILLs): {kills} over {runs} scenario runs ({finished} completed), "
        f"{seconds:.0f} s, {seconds / max(kills, 1):.2f} s per trial"
    )
    print(
        f"notifications expected: {len(per_run_expected)}, received distinct: "
        f"{len(received)}, receipts: {len(receiver.receipts)}"
    )
    print(f"missed: {len(missed)}")
    print(f"unexpected (not in the reference): {len(unexpected)}")
    print(f"duplicates by key (one notification under several keys): {dup_keys}")
    print(f"raw redeliveries of the same key: {redeliveries}")
    return 0 if not missed and not unexpected and not dup_keys else 1


if __name__ == "__main__":
    sys.exit(main())
