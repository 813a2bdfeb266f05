"""FOCUS 1.2 and 1.3 cost exports (issue #14; docs/focus.md).

On the real demo ledger (tests/conftest.py `demo_ledger`: the shipped scenario through the real
ingest path and a full refresh): the FOCUS column rules we rely on, checked row by row (the spec
files are named at each check), the identity PricingQuantity x unit price = cost exact in
decimals, the 1.3 split-allocation rules, totals reconciled with the spend views per month x app
x team, and the FinOps Foundation's focus-validator (PyPI 1.0.0, its FOCUS 1.0 rule set) run as a
subprocess from .venv-focus (scripts/setup-focus-validator). On a small exact ledger: a GPU price
change inside an hour, and cached tokens with and without a price of their own.
"""

from __future__ import annotations

import csv
import itertools
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from inferledger.cli import main
from inferledger.core.storage import Storage
from inferledger.ledger_fixtures import S, SpanSet, worked_example
from ledger.allocation import HOUR_NS
from ledger.focus import FOCUS_VERSIONS, export_focus, focus_table
from ledger.marts import refresh
from ledger.price_book import set_price

ROOT = Path(__file__).resolve().parents[1]
VALIDATOR = ROOT / ".venv-focus" / "bin" / "focus-validator"
HOUR0 = 494_444 * HOUR_NS  # 2026-05-28 20:00 UTC, an hour boundary
EPOCH = datetime(2000, 1, 1, tzinfo=UTC)
FAR = datetime(2100, 1, 1, tzinfo=UTC)

# FOCUS 1.2 columns we write (specification/columns/*.md at tag v1.2: "Column ID"), with
# whether the spec lets them be null in our rows (Usage charges, no correction, no commitment).
COLUMNS_1_2 = {
    "BilledCost": False, "BillingAccountId": False, "BillingAccountName": True,
    "BillingCurrency": False, "BillingPeriodEnd": False, "BillingPeriodStart": False,
    "ChargeCategory": False, "ChargeClass": True, "ChargeDescription": True,
    "ChargeFrequency": False, "ChargePeriodEnd": False, "ChargePeriodStart": False,
    "CommitmentDiscountCategory": True, "CommitmentDiscountId": True,
    "CommitmentDiscountName": True, "CommitmentDiscountStatus": True,
    "CommitmentDiscountType": True, "ConsumedQuantity": False, "ConsumedUnit": False,
    "ContractedCost": False, "ContractedUnitPrice": False, "EffectiveCost": False,
    "InvoiceId": True, "InvoiceIssuerName": False, "ListCost": False, "ListUnitPrice": False,
    "PricingCategory": False, "PricingQuantity": False, "PricingUnit": False,
    "ProviderName": False, "PublisherName": False, "RegionId": True, "RegionName": True,
    "ResourceId": True, "ResourceName": True, "ResourceType": True, "ServiceCategory": False,
    "ServiceName": False, "ServiceSubcategory": False, "SkuId": False, "SkuMeter": True,
    "SkuPriceId": False, "SubAccountId": True, "SubAccountName": True, "Tags": True,
}  # fmt: skip
# 1.3 adds (specification/datasets/cost_and_usage/columns/*.md, "Version Introduced 1.3").
COLUMNS_1_3 = COLUMNS_1_2 | {
    "AllocatedMethodDetails": True, "AllocatedMethodId": True, "AllocatedResourceId": True,
    "AllocatedResourceName": True, "AllocatedTags": True, "HostProviderName": False,
    "ServiceProviderName": False,
}  # fmt: skip
DECIMALS = [
    "BilledCost",
    "ConsumedQuantity",
    "ContractedCost",
    "ContractedUnitPrice",
    "EffectiveCost",
    "ListCost",
    "ListUnitPrice",
    "PricingQuantity",
]
DATETIMES = ["BillingPeriodEnd", "BillingPeriodStart", "ChargePeriodEnd", "ChargePeriodStart"]
# servicesubcategory.md (v1.2): each subcategory's one parent category (the ones we use)
SUBCATEGORY_PARENT = {
    "Generative AI": "AI and Machine Learning",
    "Other (AI and Machine Learning)": "AI and Machine Learning",
    "Other (Other)": "Other",
}
# unit_format.md (v1.2): "<plural-units>", "<singular-unit>-<plural-time-units>",
# "<quantity> <plural-units>" with a whole-number quantity; capitalised terms
UNIT = re.compile(r"^(\d+ )?[A-Z][A-Za-z]*(-[A-Z][a-z]+)?$")


# ------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def demo(demo_ledger, tmp_path_factory):
    """The demo ledger, on a private copy (opening a database recreates its views)."""
    copy = tmp_path_factory.mktemp("focus") / "demo.duckdb"
    shutil.copy(demo_ledger, copy)
    with Storage(copy, read_timeout_s=120) as storage:
        yield storage


@pytest.fixture(scope="module")
def exports(demo, tmp_path_factory) -> dict[str, Path]:
    """Each version as Parquet (typed) and CSV, over everything the ledger holds."""
    folder = tmp_path_factory.mktemp("focus-out")
    out = {}
    for version in FOCUS_VERSIONS:
        for fmt in ("parquet", "csv"):
            path = folder / f"focus-{version}.{fmt}"
            export_focus(demo, version, EPOCH, FAR, path, fmt)
            out[f"{version}.{fmt}"] = path
    return out


def _rows(path: Path) -> list[dict]:
    return pq.read_table(path).to_pylist()


def _csv(path: Path) -> pa.Table:
    """A CSV export as written: every value a string, an empty field null."""
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.reader(f)
        header = next(reader)
        columns: list[list[str | None]] = [[] for _ in header]
        for row in reader:
            for i, value in enumerate(row):
                columns[i].append(value or None)
    return pa.table({n: pa.array(c, pa.string()) for n, c in zip(header, columns, strict=True)})


# ------------------------------------------------------------------ column rules
@pytest.mark.parametrize("version", sorted(FOCUS_VERSIONS))
def test_columns_types_and_nullability_follow_the_spec(exports, version) -> None:
    table = pq.read_table(exports[f"{version}.parquet"])
    expected = COLUMNS_1_3 if version == "1.3" else COLUMNS_1_2
    names = table.column_names
    focus = [n for n in names if not n.startswith("x_")]
    assert sorted(focus) == sorted(expected)
    # column_handling.md / custom columns: every other column carries the x_ prefix
    assert {n for n in names if n.startswith("x_")} >= {"x_App", "x_Team", "x_Stage", "x_Model"}
    if version == "1.2":
        assert not [n for n in names if n.startswith("Allocated")]
    for name in DECIMALS:  # billedcost.md etc.: "MUST be of type Decimal"
        assert pa.types.is_decimal(table.schema.field(name).type), name
    for name in DATETIMES:  # datetime_format.md: UTC date/times
        field = table.schema.field(name)
        assert pa.types.is_timestamp(field.type) and field.type.tz in ("UTC", "Etc/UTC"), name
    assert table.num_rows > 100
    for name, nullable in expected.items():
        if not nullable:
            assert table.column(name).null_count == 0, f"{name} must not be null"


@pytest.mark.parametrize("version", sorted(FOCUS_VERSIONS))
def test_values_follow_the_spec(exports, demo, version) -> None:
    rows = _rows(exports[f"{version}.parquet"])
    currency = demo.scalar("select any_value(currency) from prices_effective")
    prices = {
        f"price-{pid}": (Decimal(str(p)), f"{kind}/{subject}/{unit}")
        for pid, p, kind, subject, unit in demo.fetchall(
            "select price_id, price, kind, subject, unit from prices_effective"
        )
    }
    for r in rows:
        assert r["ChargeCategory"] == "Usage"  # chargecategory.md
        assert r["ChargeFrequency"] == "Usage-Based"  # chargefrequency.md
        assert r["ChargeClass"] is None  # chargeclass.md: only "Correction"
        assert r["PricingCategory"] == "Standard"  # pricingcategory.md
        assert r["BillingCurrency"] == currency and re.fullmatch("[A-Z]{3}", currency)
        assert SUBCATEGORY_PARENT[r["ServiceSubcategory"]] == r["ServiceCategory"]
        for unit in (r["PricingUnit"], r["ConsumedUnit"]):
            assert UNIT.match(unit), unit
        assert r["ChargePeriodEnd"] - r["ChargePeriodStart"] == timedelta(hours=1)
        start = r["BillingPeriodStart"]
        assert start == r["ChargePeriodStart"].replace(day=1, hour=0)
        assert r["BillingPeriodEnd"] == (start + timedelta(days=32)).replace(day=1)
        assert isinstance(json.loads(r["Tags"]), dict)  # key_value_format.md
        assert all(k.startswith("inferledger/") for k in json.loads(r["Tags"]))  # tags.md
        # skupriceid.md: stable per price-book entry, one parent SkuId, and it looks up the
        # list (and contracted) unit price
        price, sku = prices[r["SkuPriceId"]]
        assert r["SkuId"] == sku and r["ListUnitPrice"] == price
        assert r["PricingQuantity"] >= 0 and r["ConsumedQuantity"] == r["PricingQuantity"] * (
            1_000_000 if r["x_Source"] == "tokens" else 1
        )
        assert r["PricingQuantity"] > 0 or r["x_SplitOrigin"] is not None
        if version == "1.3":  # hostprovidername.md: review runs on no infrastructure
            host = "Not Applicable" if r["x_Source"] == "review" else r["ServiceProviderName"]
            assert r["HostProviderName"] == host
    sources = {r["x_Source"] for r in rows}
    assert sources == {"tokens", "gpu", "service_call", "service_hour", "review"}
    tokens = [r for r in rows if r["x_Source"] == "tokens"]
    assert {r["ConsumedUnit"] for r in tokens} == {"Tokens"}
    assert {r["PricingUnit"] for r in tokens} == {"1000000 Tokens"}
    for r in tokens:  # PricingQuantity per 1M tokens, ConsumedQuantity in tokens
        assert r["ConsumedQuantity"] == r["PricingQuantity"] * 1_000_000
        assert r["ConsumedQuantity"] == r["ConsumedQuantity"].to_integral_value()
    assert {r["SkuMeter"] for r in tokens} >= {"Input Tokens", "Output Tokens"}
    gpu = [r for r in rows if r["x_Source"] == "gpu"]
    assert {r["ConsumedUnit"] for r in gpu} == {"GPU-Hours"}
    assert {r["ResourceId"] for r in gpu} == {
        x for (x,) in demo.fetchall("select distinct replica from mart_replica_hours")
    }


@pytest.mark.parametrize("version", sorted(FOCUS_VERSIONS))
def test_quantity_times_unit_price_is_the_cost_exactly(exports, version) -> None:
    """pricingquantity.md / listcost.md / contractedcost.md: the product MUST match, on every
    usage row; checked in exact decimals, not floats."""
    for r in _rows(exports[f"{version}.parquet"]):
        assert r["PricingQuantity"] * r["ListUnitPrice"] == r["ListCost"]
        assert r["PricingQuantity"] * r["ContractedUnitPrice"] == r["ContractedCost"]
        # docs/focus.md: the price book is the only price, and there is no invoice
        assert r["BilledCost"] == r["EffectiveCost"] == r["ListCost"] == r["ContractedCost"]


def test_csv_holds_the_same_charges_as_parquet(exports) -> None:
    for version in FOCUS_VERSIONS:
        typed = pq.read_table(exports[f"{version}.parquet"])
        text = _csv(exports[f"{version}.csv"])
        assert text.column_names == typed.column_names
        assert text.num_rows == typed.num_rows
        assert [Decimal(x) for x in text.column("ListCost").to_pylist()] == typed.column(
            "ListCost"
        ).to_pylist()
        for name in DATETIMES:  # datetime_format.md: 'YYYY-MM-DDTHH:mm:ssZ'
            for value in text.column(name).to_pylist():
                assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", value), value


# ------------------------------------------------------------------ 1.3 split allocation
def test_split_rows_carry_the_allocation_columns_and_add_up_to_their_origin(exports) -> None:
    """provider_calculated_split_cost_allocation_handling.md and allocatedmethoddetails.md,
    allocatedresourceid.md, allocatedtags.md (introduced in 1.3)."""
    rows = _rows(exports["1.3.parquet"])
    split = [r for r in rows if r["x_SplitOrigin"] is not None]
    whole = [r for r in rows if r["x_SplitOrigin"] is None]
    assert split and whole
    allocated = ("AllocatedMethodId", "AllocatedMethodDetails", "AllocatedTags")
    for r in whole:
        assert all(r[c] is None for c in (*allocated, "AllocatedResourceId"))
    origins = defaultdict(list)
    for r in split:
        assert r["AllocatedMethodId"] in ("inferledger-gpu-share", "inferledger-service-duration")
        details = json.loads(r["AllocatedMethodDetails"], parse_float=Decimal)
        (element,) = details["Elements"]
        assert set(element) <= {"AllocatedRatio", "UsageUnit", "UsageQuantity"}
        tags, allocated_tags = json.loads(r["Tags"]), json.loads(r["AllocatedTags"])
        assert not set(tags) & set(allocated_tags)  # MUST NOT repeat resource tags
        if r["x_Stage"] == "idle":  # the unallocated portion: no allocated resource
            assert r["AllocatedResourceId"] is None and r["x_App"] is None
        else:
            assert (
                r["AllocatedResourceId"] and f"app={r['x_App'] or ''}" in (r["AllocatedResourceId"])
            )
        origins[r["x_SplitOrigin"]].append((element["AllocatedRatio"], r))
    gpu_origins = {k for k, v in origins.items() if v[0][1]["x_Source"] == "gpu"}
    assert len(gpu_origins) > 10
    assert any(r["x_Stage"] == "idle" for v in origins.values() for _, r in v)
    for parts in origins.values():
        assert sum(ratio for ratio, _ in parts) == 1  # exactly, in decimals
        # dimensions and unit prices match the origin charge's
        for column in ("ResourceId", "SkuPriceId", "ListUnitPrice", "ChargePeriodStart", "Tags"):
            assert len({r[column] for _, r in parts}) == 1, column
        # each part's share of the origin's quantity is its ratio (to the 9 places we keep)
        total = sum(r["PricingQuantity"] for _, r in parts)
        for ratio, r in parts:
            assert abs(r["PricingQuantity"] - total * ratio) <= Decimal("1e-9") * len(parts)


# ------------------------------------------------------------------ reconciliation
def _spend_by_month_app_team(storage: Storage) -> dict[tuple, float]:
    rows = storage.fetchall(
        "select strftime(timezone('UTC', hour), '%Y-%m'), app, team, sum(cost) "
        "from spend_hourly where idle_policy = 'separate' group by all"
    )
    return {(m, a, t): c for m, a, t, c in rows}


def _focus_by_month_app_team(rows: list[dict]) -> dict[tuple, float]:
    out: dict[tuple, float] = defaultdict(float)
    for r in rows:
        key = (r["BillingPeriodStart"].strftime("%Y-%m"), r["x_App"], r["x_Team"])
        out[key] += float(r["BilledCost"])
    return dict(out)


@pytest.mark.parametrize("version", sorted(FOCUS_VERSIONS))
def test_totals_reconcile_with_the_ledger_per_month_app_and_team(exports, demo, version) -> None:
    ours = _spend_by_month_app_team(demo)
    focus = _focus_by_month_app_team(_rows(exports[f"{version}.parquet"]))
    for key in set(ours) | set(focus):
        assert focus.get(key, 0.0) == pytest.approx(ours.get(key, 0.0), abs=0.01), key
    assert {k for k, v in focus.items() if v > 0.01} == {k for k, v in ours.items() if v > 0.01}
    (total,) = demo.fetchall("select sum(total) from spend_totals")[0]
    assert sum(focus.values()) == pytest.approx(total, abs=0.01)
    apps = {a for _, a, _ in focus if a}
    assert len(apps) >= 3


# ------------------------------------------------------------------ the official validator
# focus-validator 1.0.0's "1.0" rule set predates three renames of the ratified FOCUS 1.0
# (InvoiceIssuer -> InvoiceIssuerName, Provider -> ProviderName, Publisher -> PublisherName) and
# spells ResourceId "ResourceID"; its SkuPriceId_Nullable rule reads ChargeType, which 1.0
# renamed ChargeCategory. So the validator gets our columns that exist in FOCUS 1.0 under its
# names, and that one rule is overridden (our own check of it: test_values_follow_the_spec).
VALIDATOR_NAMES = {
    "InvoiceIssuerName": "InvoiceIssuer",
    "ProviderName": "Provider",
    "PublisherName": "Publisher",
    "ResourceId": "ResourceID",
}
AFTER_1_0 = {"InvoiceId", "ServiceSubcategory", "SkuMeter", "HostProviderName",
             "ServiceProviderName"}  # fmt: skip


def _validate(csv_path: Path, folder: Path) -> ET.Element:
    """Run focus-validator on a CSV (its FOCUS 1.0 rule set); its JUnit report's root."""
    table = _csv(csv_path)
    keep = [
        n
        for n in table.column_names
        if not n.startswith(("x_", "Allocated")) and n not in AFTER_1_0
    ]
    table = table.select(keep).rename_columns([VALIDATOR_NAMES.get(n, n) for n in keep])
    data = folder / "focus-1.0-columns.csv"
    pacsv.write_csv(table, data)
    override = folder / "override.yaml"
    override.write_text("overrides: [SkuPriceId_Nullable]\n")
    report = folder / "report.xml"
    site = next((VALIDATOR.parents[1] / "lib").glob("python3.*/site-packages"))
    # its currency check reads focus_validator/utils/currency_codes.csv relative to the
    # working folder, so it runs from its site-packages
    done = subprocess.run(
        [str(VALIDATOR), "--data-file", str(data), "--validate-version", "1.0",
         "--override-file", str(override), "--output-type", "unittest",
         "--output-destination", str(report)],
        cwd=site, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert report.exists(), done.stdout + done.stderr
    return ET.parse(report).getroot()


@pytest.mark.slow
@pytest.mark.skipif(
    not VALIDATOR.exists(), reason="no .venv-focus: run scripts/setup-focus-validator"
)
@pytest.mark.parametrize("version", sorted(FOCUS_VERSIONS))
def test_focus_validator_finds_no_error(exports, version, tmp_path) -> None:
    root = _validate(exports[f"{version}.csv"], tmp_path)
    failed = [
        tc.get("name")
        for tc in root.iter("testcase")
        if tc.find("failure") is not None or tc.find("error") is not None
    ]
    assert failed == []
    assert (int(root.get("failures")), int(root.get("errors"))) == (0, 0)
    assert int(root.get("tests")) >= 130 and int(root.get("skipped")) == 1


@pytest.mark.slow
@pytest.mark.skipif(
    not VALIDATOR.exists(), reason="no .venv-focus: run scripts/setup-focus-validator"
)
def test_focus_validator_does_find_errors(exports, tmp_path) -> None:
    """The run above could pass by checking nothing: spoil two values and it must fail."""
    text = exports["1.2.csv"].read_text()
    spoiled = tmp_path / "spoiled.csv"
    spoiled.write_text(text.replace("Usage-Based", "Sometimes", 1).replace(",USD,", ",Dollars,", 1))
    root = _validate(spoiled, tmp_path)
    failed = {tc.get("name").split(" ::")[0] for tc in root.iter("testcase") if len(tc) > 0} - {
        "SkuPriceId_Nullable"
    }
    assert {"ChargeFrequency_Enum", "BillingCurrency_IsCurrencyCode"} <= failed


# ------------------------------------------------------------------ exact small ledger
def _small_ledger(storage: Storage) -> None:
    """The worked example 100 s into HOUR0 (replica r0, 1 x H200, up [100, 200) s), the GPU's
    price rising from $3.60 to $4.80 at 150 s, and two hosted calls: one to a model with a
    cached-input price, one to a model without (its cached tokens are charged as input)."""
    worked_example(storage, HOUR0 + 100 * S)
    for args in (
        ("gpu", "H200", "gpu_hour", 4.80, "2026-05-28T20:02:30Z"),
        ("model", "with-cache", "input_mtok", 2.00, "2026-01-01"),
        ("model", "with-cache", "cached_input_mtok", 0.50, "2026-01-01"),
        ("model", "with-cache", "output_mtok", 8.00, "2026-01-01"),
        ("model", "no-cache", "input_mtok", 1.00, "2026-01-01"),
        ("model", "no-cache", "output_mtok", 4.00, "2026-01-01"),
    ):
        set_price(storage, *args, changed_by="test", source="cli")
    spans = SpanSet(HOUR0, _ids=itertools.count(1000))  # ids apart from worked_example's
    for model in ("with-cache", "no-cache"):
        trace = spans.new_trace()
        root = spans.root(trace, 300, 310, app="hosted-app", route="/h", team="th")
        spans.llm_call(
            trace, root, 301, 309, model=model, provider="openai", input_tokens=1_000_000,
            cached_tokens=400_000, output_tokens=50_000,
        )  # fmt: skip
    spans.store(storage)
    refresh(storage)


def test_a_price_change_inside_an_hour_and_cached_tokens(storage) -> None:
    _small_ledger(storage)
    start = datetime.fromtimestamp(HOUR0 / 1e9, UTC)
    rows = focus_table(storage, "1.3", start, start + timedelta(hours=1)).to_pylist()
    gpu = [r for r in rows if r["x_Source"] == "gpu"]
    # 50 s at each price: the hour's two origin charges, each 50/3600 GPU-hours
    by_price: dict[Decimal, Decimal] = defaultdict(Decimal)
    for r in gpu:
        by_price[r["ListUnitPrice"]] += r["PricingQuantity"]
    assert by_price == {
        Decimal("3.6"): pytest.approx(Decimal(50) / 3600, abs=Decimal("1e-9")),
        Decimal("4.8"): pytest.approx(Decimal(50) / 3600, abs=Decimal("1e-9")),
    }
    (gpu_cost,) = storage.fetchall("select sum(total_cost) from mart_replica_hours")[0]
    assert float(sum(r["ListCost"] for r in gpu)) == pytest.approx(gpu_cost, abs=1e-8)
    assert len({r["x_SplitOrigin"] for r in gpu}) == 2
    tokens = {
        (r["x_Model"], r["SkuMeter"]): (r["ConsumedQuantity"], r["ListCost"])
        for r in rows
        if r["x_Source"] == "tokens"
    }
    assert tokens == {
        ("with-cache", "Input Tokens"): (600_000, Decimal("1.2")),
        ("with-cache", "Cached Input Tokens"): (400_000, Decimal("0.2")),
        ("with-cache", "Output Tokens"): (50_000, Decimal("0.4")),
        ("no-cache", "Input Tokens"): (1_000_000, Decimal("1.0")),
        ("no-cache", "Output Tokens"): (50_000, Decimal("0.2")),
    }
    (hosted,) = storage.fetchall(
        "select sum(prefill_cost + decode_cost) from mart_requests where engine_span_id is null"
    )[0]
    assert hosted == pytest.approx(3.0)
    (spend,) = storage.fetchall(
        "select sum(cost) from spend_hourly where idle_policy = 'separate'"
    )[0]
    assert float(sum(r["BilledCost"] for r in rows)) == pytest.approx(spend, abs=1e-8)


# ------------------------------------------------------------------ the command
def test_the_command_writes_the_file_and_refuses_bad_input(storage, tmp_path, capsys) -> None:
    _small_ledger(storage)
    db = storage.path
    storage.close()
    out = tmp_path / "focus.parquet"
    args = ["export-focus", "--version", "1.3", "--db", db, "--out", str(out)]
    assert main([*args, "--from", "2026-05-28T20:00:00Z", "--to", "2026-05-29"]) == 0
    said = capsys.readouterr().out
    assert said.startswith("wrote ") and "FOCUS 1.3" in said and "(parquet)" in said
    meta = pq.read_schema(out).metadata
    assert meta[b"focus_version"] == b"1.3" and meta[b"idle_policy"] == b"separate"
    assert pq.read_table(out).num_rows > 5

    bad = tmp_path / "bad.csv"
    for when, message in (
        (["--from", "yesterday", "--to", "2026-05-29"], "--from: not an ISO 8601"),
        (["--from", "2026-05-29", "--to", "2026-05-28"], "must be after --from"),
    ):
        base = ["export-focus", "--version", "1.2", "--db", db, "--out", str(bad)]
        assert main([*base, *when]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and message in err
    missing = ["export-focus", "--version", "1.2", "--from", "2026-05-28", "--to", "2026-05-29"]
    assert main([*missing, "--db", str(tmp_path / "nope.duckdb"), "--out", str(bad)]) == 2
    assert "no database" in capsys.readouterr().err
    assert main([*missing, "--db", db, "--out", str(tmp_path / "no" / "f.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not bad.exists() and not list(tmp_path.glob(".*.tmp"))
