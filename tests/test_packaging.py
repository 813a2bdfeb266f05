"""The wheel's package list (pyproject.toml) names every package of the source tree, so an
installed InferLedger has every module a checkout has (a new package is easy to forget: the
tests run from the checkout and would not notice)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOP = ("inferledger", "app", "ingest", "ledger", "models", "sql")


def _config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_package_of_the_tree_is_installed() -> None:
    declared = set(_config()["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in TOP
        for init in (ROOT / top).rglob("__init__.py")
    }
    assert found == declared, (
        f"missing from pyproject: {sorted(found - declared)}; "
        f"declared but absent: {sorted(declared - found)}"
    )


def test_every_data_file_the_product_reads_is_package_data() -> None:
    data = _config()["tool"]["setuptools"]["package-data"]
    # SQL files under sql/ (migrations, views, macros, marts, queries, ingest statements)
    assert "**/*.sql" in data["sql"]
    sql_files = list((ROOT / "sql").rglob("*.sql"))
    assert len(sql_files) > 50
    # catalogs and reference data under models/data
    patterns = data["models"]
    for path in (ROOT / "models" / "data").iterdir():
        if path.is_file():
            assert any(path.match(p) for p in patterns), f"{path.name} is not package data"
