"""The named queries the frame and the admin pages run (sql/queries/data_presence.sql,
filter_options.sql, deployment_replicas.sql): issue #9 moved them out of app/; they return what
the inline statements did."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from inferledger.ledger_fixtures import S, worked_example
from ledger.allocation import HOUR_NS
from ledger.marts import refresh
from ledger.queries import Filters, run

HOUR0 = 494_444 * HOUR_NS
START = datetime.fromtimestamp(HOUR0 / S, UTC)
FILTERS = Filters(START - timedelta(days=1), START + timedelta(hours=2))
FIELDS = ("environment", "team", "app", "route", "model")


@pytest.fixture
def ledger(storage):
    worked_example(storage, HOUR0 + 100 * S)
    refresh(storage)
    return storage


def test_data_presence_on_an_empty_database(storage) -> None:
    (row,) = run(storage, "data_presence", FILTERS).to_pylist()
    assert row == {"spans": 0, "refreshes": 0, "first_hour": None, "last_hour": None}


def test_data_presence_after_a_refresh(ledger) -> None:
    (row,) = run(ledger, "data_presence", FILTERS).to_pylist()
    assert row["spans"] == 1  # existence, not a count
    assert row["refreshes"] == ledger.scalar("select count(*) from mart_refresh_log") > 0
    first, last = ledger.fetchall("select min(hour), max(hour) from mart_spend_hourly")[0]
    assert (row["first_hour"], row["last_hour"]) == (first, last)


def test_filter_options_are_each_columns_distinct_values_in_order(ledger) -> None:
    rows = run(ledger, "filter_options", FILTERS).to_pylist()
    assert rows
    for field in FIELDS:
        inline = [
            r[0]
            for r in ledger.fetchall(
                f"select distinct {field} from mart_spend_hourly where {field} is not null "
                "order by 1 limit 500"
            )
        ]
        assert [r["value"] for r in rows if r["field"] == field] == inline
    assert {r["field"] for r in rows} <= set(FIELDS)


def test_deployment_replicas_lists_every_replica_by_deployment(ledger) -> None:
    rows = run(ledger, "deployment_replicas", FILTERS).to_pylist()
    inline = ledger.fetchall(
        "select replica, deployment from deployment_replicas order by deployment, replica"
    )
    assert [(r["replica"], r["deployment"]) for r in rows] == [tuple(r) for r in inline]
    assert rows
    assert {"gpus_source", "idle_policy", "idle_policy_source", "num_gpu_blocks"} <= set(rows[0])
