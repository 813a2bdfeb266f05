"""The durable spool: order kept across restarts, torn writes dropped, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from inferledger.core.errors import StorageError
from ingest.spool import Spool


def test_sequence_continues_after_restart_and_torn_writes_are_dropped(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s")
    first = spool.append(b"one")
    second = spool.append(b"two")
    (tmp_path / "s" / "00000000000000000003.tmp").write_bytes(b"half")  # crash mid-write
    again = Spool(tmp_path / "s")
    assert [e.seq for e in again.pending()] == [first.seq, second.seq] == [1, 2]
    assert not list((tmp_path / "s").glob("*.tmp"))
    assert again.append(b"three").seq == 3
    assert [e.path.read_bytes() for e in again.pending()] == [b"one", b"two", b"three"]


def test_quarantine_keeps_the_request_and_the_reason(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s")
    entry = spool.append(b"bad")
    moved = spool.quarantine(entry, "insert failed: boom")
    assert spool.pending() == []
    assert moved.read_bytes() == b"bad"
    assert moved.with_suffix(".reason.txt").read_text() == "insert failed: boom\n"


def test_unusable_folder_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(StorageError, match=r"cannot use spool folder .*file"):
        Spool(blocker)


def test_new_requests_never_reuse_a_quarantined_name(tmp_path: Path) -> None:
    spool = Spool(tmp_path / "s")
    moved = spool.quarantine(spool.append(b"bad"), "insert failed: boom")
    again = Spool(tmp_path / "s")  # restart with nothing pending
    entry = again.append(b"good")
    assert entry.seq == 2
    again.quarantine(entry, "insert failed: later")
    assert moved.read_bytes() == b"bad", "a quarantined request was overwritten"
