"""`inferledger plan SCENARIO.yaml`: bad input (one line on stderr, exit 2, nothing written),
the shipped example scenarios, and one real plan end to end (--json, --save, --record), whose
result also checks the --csv and table outputs."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from inferledger.cli import main
from inferledger.core.storage import Storage
from inferledger.plan_cli import plan_csv, plan_table
from ledger import capacity_plans as store
from models.capacity.plan import plan_from_mapping
from tests.test_capacity_plans import sample_result

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples" / "plans"
TODAY = EXAMPLES / "chat-today.yaml"


def _fails(capsys, argv: list[str], message: str) -> str:
    assert main(["plan", *argv]) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if not line.startswith("plan: ")]
    assert out == "" and len(lines) == 1, err
    assert lines[0].startswith("inferledger: ") and message in lines[0], lines[0]
    return lines[0]


def _scenario(tmp_path: Path, text: str) -> str:
    path = tmp_path / "scenario.yaml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def _today() -> dict:
    return yaml.safe_load(TODAY.read_text(encoding="utf-8"))


def test_bad_scenarios_are_one_line(capsys, tmp_path) -> None:
    _fails(capsys, [str(tmp_path / "nope.yaml")], "nope.yaml': no such file")
    _fails(capsys, [_scenario(tmp_path, "name: [unclosed\n")], "is not valid YAML at line")
    _fails(capsys, [_scenario(tmp_path, "- a\n- b\n")], "needs a mapping of fields")
    unknown = {**_today(), "colour": "blue"}
    line = _fails(capsys, [_scenario(tmp_path, yaml.safe_dump(unknown))], "unknown field(s) colour")
    assert "scenario file" in line
    bad_slo = _today()
    bad_slo["slos"]["interactive"]["ttft_p95_ms"] = -5
    _fails(capsys, [_scenario(tmp_path, yaml.safe_dump(bad_slo))], "ttft_p95_ms must be > 0")


def test_bad_flags(capsys) -> None:
    _fails(capsys, [str(TODAY), "--record", "md"], "--record needs --out FILE")
    _fails(capsys, [str(TODAY), "--out", "x.md"], "--out needs --record")
    _fails(capsys, [str(TODAY), "--name", "x"], "--name and --by go with --save")
    for argv in (["--json", "--csv"], ["--workers", "-1"], ["--workers", "two"]):
        with pytest.raises(SystemExit) as exit_:
            main(["plan", str(TODAY), *argv])  # argparse refuses these
        assert exit_.value.code == 2
        assert "usage:" in capsys.readouterr().err


def test_a_profile_from_the_ledger(capsys, tmp_path) -> None:
    base = {k: v for k, v in _today().items() if k != "profile"}
    window = {"start": "2026-11-01T00:00:00Z", "end": "2026-11-08T00:00:00Z", "apps": ["chat"]}
    typo = {**base, "profile": {"from_ledger": {**window, "app": "x"}}}
    typo = _scenario(tmp_path, yaml.safe_dump(typo))
    _fails(capsys, [typo], "profile.from_ledger: unknown field(s) app")
    backwards = {**window, "end": "2026-10-01T00:00:00Z"}
    path = _scenario(tmp_path, yaml.safe_dump({**base, "profile": {"from_ledger": backwards}}))
    _fails(capsys, [path], "profile.from_ledger: end must be after start")
    path = _scenario(tmp_path, yaml.safe_dump({**base, "profile": {"from_ledger": window}}))
    _fails(capsys, [path, "--db", str(tmp_path / "missing.duckdb")], "no database at")
    # an existing ledger without those requests: the profile loader's own one-line answer
    db = tmp_path / "ledger.duckdb"
    Storage(db).open().close()
    line = _fails(capsys, [path, "--db", str(db)], "inferledger: ")
    assert "chat" in line


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_the_example_scenarios_are_valid(path) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    inputs = plan_from_mapping(data, str(path))
    assert inputs.name == path.stem
    assert {a.app for a in inputs.profile.apps} == {"chat", "summarize"}
    assert inputs.space.size <= 4 and inputs.verify_top <= 3  # runs in seconds


def test_the_examples_differ_only_where_they_say() -> None:
    def load(name: str) -> dict:
        return yaml.safe_load((EXAMPLES / name).read_text(encoding="utf-8"))

    today, x2, fp8 = (
        load("chat-today.yaml"),
        load("chat-traffic-x2.yaml"),
        load("chat-fp8-h200.yaml"),
    )
    assert {**x2, "name": today["name"], "knobs": today["knobs"]} == today
    assert x2["knobs"] == {"traffic": 2.0}
    assert {**fp8, "name": today["name"], "candidates": today["candidates"]} == today
    assert (fp8["candidates"]["gpus"], fp8["candidates"]["dtypes"]) == (["H200"], ["fp8"])


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """chat-today.yaml planned once through `inferledger plan` (a real process), with --json,
    --save into a ledger and --record html."""
    folder = tmp_path_factory.mktemp("plan")
    db, record = folder / "ledger.duckdb", folder / "record.html"
    Storage(db).open().close()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inferledger.cli",
            "plan",
            str(TODAY),
            "--json",
            "--save",
            "--db",
            str(db),
            "--by",
            "ann",
            "--name",
            "today",
            "--record",
            "html",
            "--out",
            str(record),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr, db, record


def test_end_to_end_json(planned) -> None:
    result, stderr, _, _ = planned
    assert "plan: 100 % done" in stderr and "plan: saved as plan #1" in stderr
    assert {
        "planner_version",
        "model_version",
        "name",
        "created_at",
        "duration_s",
        "inputs",
        "model_error",
        "pools",
        "forecast",
        "unplanned",
        "hosted",
        "totals",
    } <= set(result)
    assert result["name"] == "chat-today" and result["inputs"]["seed"] == 0
    pools = {p["name"]: p for p in result["pools"]}
    assert set(pools) == {"interactive/llama-3.1-8b", "batch/llama-3.1-8b"}
    total = 0.0
    for pool in pools.values():
        assert pool["best"] is not None
        best = pool["candidates"][pool["best"]]
        assert best["verified"] and best["at_peak"]["meets_slo"]
        assert best["replicas_low"] <= best["replicas"] <= best["replicas_high"]
        assert best["monthly_cost"] == min(
            c["monthly_cost"] for c in pool["candidates"] if c["verified"]
        )
        assert [a["app"] for a in pool["apps_cost"]] == pool["apps"]
        total += best["monthly_cost"]
    assert result["totals"]["monthly_cost"] == pytest.approx(total)
    assert set(result["forecast"]) == {"chat", "summarize"}


def test_end_to_end_saved_and_recorded(planned) -> None:
    result, _, db, record = planned
    with Storage(db) as storage:
        saved = store.get_plan(storage, 1)
        [summary] = store.list_plans(storage)
    assert saved["name"] == "today" and saved["saved_by"] == "ann"
    assert {k: v for k, v in saved.items() if k in result and k != "name"} == {
        k: v for k, v in result.items() if k != "name"
    }
    assert summary.monthly_cost == pytest.approx(result["totals"]["monthly_cost"])
    page = record.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page
    assert "Capacity plan: chat-today" in page and "Model error and residual risk" in page


def test_csv_and_table_of_a_real_result(planned) -> None:
    result = planned[0]
    rows = list(csv.DictReader(io.StringIO(plan_csv(result))))
    assert len(rows) == sum(len(p["candidates"]) for p in result["pools"])
    assert sum(r["best"] == "True" for r in rows) == 2
    first = rows[0]
    pool = result["pools"][0]
    c = pool["candidates"][0]
    assert (first["pool"], first["label"], first["gpu"]) == (
        pool["name"],
        c["label"],
        c["candidate"]["gpu"],
    )
    assert float(first["monthly_cost"]) == pytest.approx(c["monthly_cost"])
    assert float(first["at_peak_ttft_p95_s"]) == pytest.approx(c["at_peak"]["ttft_p95_s"])
    text = plan_table(result)
    for pool in result["pools"]:
        assert f"pool {pool['name']}: apps {', '.join(pool['apps'])}" in text
        best = pool["candidates"][pool["best"]]
        assert any(line.startswith("1 ★") and best["label"] in line for line in text.splitlines())
    assert text.splitlines()[-1].startswith("total: $")


def test_table_of_a_pool_without_a_recommendation() -> None:
    result = sample_result(pools=2)
    text = plan_table(result)
    assert "no candidate meets the SLOs at the peak" in text
    assert "not planned: summarize (model gpt-4o is hosted, not planned)" in text
    rows = list(csv.DictReader(io.StringIO(plan_csv(result))))
    assert len(rows) == 24 and rows[0]["best"] == "True" and rows[12]["best"] == "False"
    assert rows[5]["at_peak_ttft_p95_s"] == ""  # screened only: no simulated point


def test_prices_the_scenario_leaves_out_come_from_the_price_book(tmp_path) -> None:
    from datetime import UTC, datetime

    from inferledger.core.errors import BadInputError
    from inferledger.plan_cli import with_book_prices
    from ledger import price_book

    storage = Storage(tmp_path / "ledger.duckdb").open()
    try:
        price_book.seed_if_empty(storage)  # the bundled book: H100-SXM $3.00, gpt-4.1-mini ...
        data = _today()
        data["candidates"]["prices"] = {"H200": 9.99}  # typed: wins over the book's $4.00
        data["knobs"] = {"moves": [{"app": "chat", "share": 0.2, "hosted": "gpt-4.1-mini"}]}
        filled = with_book_prices(data, storage, datetime(2026, 12, 1, tzinfo=UTC))
        assert filled["candidates"]["prices"] == {"H200": 9.99, "H100-SXM": 3.0}
        assert filled["hosted_prices"] == {"gpt-4.1-mini": [0.40, 1.60]}
        assert data["candidates"]["prices"] == {"H200": 9.99}  # the input is left as it was
        inputs = plan_from_mapping(filled)
        assert inputs.space.price("H100") == 3.0 and inputs.space.price("H200") == 9.99
        data["knobs"]["moves"][0]["hosted"] = "no-such-model"
        with pytest.raises(BadInputError, match="no token prices for no-such-model"):
            with_book_prices(data, storage, datetime(2026, 12, 1, tzinfo=UTC))
    finally:
        storage.close()
