"""The published-runs data of the serving-fidelity harness (bench/fidelity.py, issue #11): the
file loads, every row cites its source and states its conditions, the splits hold at least a
third of the rows back, every row marked expressible builds a scenario the simulator accepts,
and the scoring arithmetic is right. No test compares against the measured errors."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _load_harness() -> Any:
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "bench" / "fidelity.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fidelity"] = module  # dataclasses look their module up while being built
    spec.loader.exec_module(module)
    return module


fid = _load_harness()
RUNS = fid.load_runs()


def _row(**overrides: Any) -> dict[str, Any]:
    """A valid row (the CI latency test's shape), with fields replaced or removed (None)."""
    row: dict[str, Any] = {
        "id": "tiny",
        "split": "fit",
        "source": {"url": "https://example.org/run", "date": "2026-01-01", "quote": "table 1"},
        "engine": {"version": "0.0.0", "era": "v1"},
        "conditions": {
            "model": "llama-3.1-8b",
            "gpu": "H200",
            "num_prompts": 8,
            "random_input_len": 32,
            "random_output_len": 128,
            "request_rate": "inf",
        },
        "truth": {"batch_latency_ms": 800.0, "request_throughput": 5.0},
    }
    for key, value in overrides.items():
        if value is None:
            row.pop(key, None)
        else:
            row[key] = value
    return row


def test_the_data_file_loads_with_unique_ids() -> None:
    assert len(RUNS) >= 10
    ids = [r.id for r in RUNS]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r.id)
def test_every_row_cites_a_source_and_states_conditions(run: Any) -> None:
    src = run.source
    assert src.get("url") or all(src.get(k) for k in ("repo", "path", "commit"))
    if src.get("commit"):
        assert len(src["commit"]) == 40 and int(src["commit"], 16) >= 0
    assert src["quote"].strip() and str(src["date"]).strip()
    assert run.conditions and run.truth
    assert run.engine["era"] in fid.ERAS and str(run.engine["version"]).strip()
    assert run.split in ("fit", "holdout")
    if not run.expressible:
        assert run.not_expressible.strip()


def test_at_least_a_third_is_held_out_overall_and_among_runnable_rows() -> None:
    runnable = [r for r in RUNS if r.expressible]
    for group in (RUNS, runnable):
        held = sum(r.split == "holdout" for r in group)
        assert held * 3 >= len(group), f"{held} of {len(group)} held out"
    assert any(r.split == "fit" for r in runnable)


@pytest.mark.parametrize("run", [r for r in RUNS if r.expressible], ids=lambda r: r.id)
def test_every_expressible_row_builds_a_valid_scenario(run: Any) -> None:
    fid.check_expressible(run)  # resolves KV blocks and scheduler limits; raises if invalid
    scenario = run.scenario()
    assert scenario.model and scenario.gpu


def test_every_truth_metric_is_one_the_simulator_reports() -> None:
    summary_keys = {"duration", "request_throughput", "output_throughput"}
    for run in RUNS:
        for metric in run.truth:
            assert metric in fid.METRICS
        assert set(run.not_comparable) <= set(run.truth)
    assert summary_keys <= fid.METRICS


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"split": "train"}, "split must be one of fit, holdout"),
        ({"source": {"url": "https://x", "date": "d"}}, "needs a quote"),
        ({"source": {"repo": "a/b", "path": "p", "quote": "q", "date": "d"}}, "url, or repo"),
        ({"engine": {"version": "1", "era": "v2"}}, "engine.era must be one of"),
        ({"truth": {"mean_ttft": 1.0}}, "unknown truth metric 'mean_ttft'"),
        ({"truth": {"mean_ttft_ms": 0}}, "mean_ttft_ms must be > 0"),
        ({"not_comparable": ["median_itl_ms"]}, "not_comparable names a metric not in truth"),
        ({"conditions": {"model": "llama-3.1-8b"}}, "needs conditions.model and conditions.gpu"),
        ({"colour": "red"}, "unknown field(s) colour"),
    ],
)
def test_a_broken_row_is_refused_naming_it(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(fid.DataError, match=r"^tiny: ") as info:
        fid.parse_run(_row(**overrides), 0)
    assert message in str(info.value)


def test_a_repeated_id_is_refused(tmp_path: Path) -> None:
    import yaml

    path = tmp_path / "runs.yaml"
    path.write_text(yaml.safe_dump({"rows": [_row(), _row()]}), encoding="utf-8")
    with pytest.raises(fid.DataError, match="tiny: id used twice"):
        fid.load_runs(path)


def test_one_tiny_run_is_scored_as_the_simulator_measures_it() -> None:
    run = fid.parse_run(_row(), 0)
    result = fid.simulate_row(run)
    by_name = {m.metric: m for m in result.metrics}
    latency = by_name["batch_latency_ms"]
    # eight 32-token prompts and 128 tokens each: at least 128 decode steps of >= 1 ms
    assert 128 < latency.predicted < 60_000
    assert latency.error_pct == pytest.approx(100 * (latency.predicted - 800.0) / 800.0)
    assert result.family_error("e2e") is latency
    assert result.family_error("throughput") is by_name["request_throughput"]
    assert result.family_error("ttft") is None
    # the same run again gives the same numbers: the harness is deterministic
    again = fid.simulate_row(run)
    assert [m.predicted for m in again.metrics] == [m.predicted for m in result.metrics]


def _result(row_id: str, split: str, era: str, **errors: float) -> Any:
    run = fid.parse_run(
        _row(
            id=row_id,
            split=split,
            engine={"version": "x", "era": era},
            truth=dict.fromkeys(errors, 100.0),
        ),
        0,
    )
    metrics = tuple(fid.MetricError(m, 100.0, 100.0 + e, True) for m, e in errors.items())
    return fid.RowResult(run, metrics, 0.0)


def test_the_summary_takes_one_metric_per_row_and_family_and_splits_fit_from_holdout() -> None:
    results = [
        _result("a", "fit", "v1", mean_e2el_ms=10.0, median_e2el_ms=-50.0, mean_ttft_ms=-4.0),
        _result("b", "fit", "v0", median_e2el_ms=-20.0, median_itl_ms=3.0),
        _result("c", "holdout", "v1", batch_latency_ms=-30.0, output_throughput=6.0),
    ]
    fit = fid.family_summary(results, splits=("fit",))
    assert fit["e2e"] == {"rows": 2, "median_abs_pct": 15.0, "median_signed_pct": -5.0}
    assert fit["itl"]["rows"] == 1 and fit["itl"]["median_abs_pct"] == pytest.approx(3.0)
    assert fit["throughput"] == {"rows": 0, "median_abs_pct": None, "median_signed_pct": None}
    held = fid.family_summary(results, splits=("holdout",))
    assert held["e2e"]["median_abs_pct"] == pytest.approx(30.0)
    v1 = fid.family_summary(results, splits=fid.SPLITS, eras=("v1",))
    assert v1["e2e"]["rows"] == 2 and v1["itl"]["rows"] == 0
    blocks = fid.summaries(results)
    assert blocks["all engines / all"]["e2e"]["rows"] == 3


def test_a_metric_marked_not_comparable_is_shown_but_not_scored() -> None:
    run = fid.parse_run(
        _row(
            truth={"median_itl_ms": 100.0, "median_tpot_ms": 10.0}, not_comparable=["median_itl_ms"]
        ),
        0,
    )
    metrics = (
        fid.MetricError("median_itl_ms", 100.0, 10.0, False),
        fid.MetricError("median_tpot_ms", 10.0, 11.0, True),
    )
    result = fid.RowResult(run, metrics, 0.0)
    assert result.family_error("itl").metric == "median_tpot_ms"
    assert math.isclose(result.family_error("itl").error_pct, 10.0)


def test_the_command_refuses_an_unknown_row_id(capsys: pytest.CaptureFixture[str]) -> None:
    assert fid.main(["--rows", "no-such-row"]) == 2
    assert "unknown row id(s) no-such-row" in capsys.readouterr().err


def test_the_command_lists_rows_it_cannot_express_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    skipped = next(r for r in RUNS if not r.expressible)
    out = tmp_path / "out.json"
    assert fid.main(["--rows", skipped.id, "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"{skipped.id}  [" in printed and "not expressible:" in printed
    import json

    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["rows"] == [] and report["not_expressible"][0]["id"] == skipped.id
    assert report["anchor_blis_median_pct"] == {"e2e": 6.7, "itl": 7.1, "ttft": 17.6}


def test_several_seeds_give_the_mean_and_the_range_of_the_predictions() -> None:
    run = fid.parse_run(
        _row(
            conditions={
                "model": "llama-3.1-8b",
                "gpu": "H200",
                "dataset_name": "sharegpt",
                "num_prompts": 20,
                "request_rate": "inf",
            },
            truth={"request_throughput": 10.0},
        ),
        0,
    )
    one = [fid.simulate_row(run).metrics[0].predicted]
    one.append(
        fid.simulate_row(
            fid.parse_run(
                _row(conditions={**run.conditions, "seed": 1}, truth={"request_throughput": 10.0}),
                0,
            )
        )
        .metrics[0]
        .predicted
    )
    both = fid.simulate_row(run, seeds=2).metrics[0]
    assert both.predicted == pytest.approx(sum(one) / 2)
    assert (both.low, both.high) == (min(one), max(one))
    assert fid.simulate_row(run).metrics[0].low is None


def test_a_row_the_simulator_refuses_stops_the_command_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import yaml

    path = tmp_path / "runs.yaml"
    bad = _row(conditions={**_row()["conditions"], "gpu": "TPU-v5"})
    path.write_text(yaml.safe_dump({"rows": [bad]}), encoding="utf-8")
    assert fid.main(["--data", str(path)]) == 2
    assert "error: tiny: unknown GPU 'TPU-v5'" in capsys.readouterr().err
