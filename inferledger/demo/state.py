"""What the demo was asked and what its database holds.

`DemoOptions` (the command's options, checked), `DemoState` (`<db>.demo.json` beside the
database: how the data was generated, and which history is not fully loaded yet, so an
interrupted load is resumed, never mistaken for a complete one), the demo's time grid, and
`DemoError`. The bottom of the demo package: it imports nothing else from it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from inferledger import __version__
from inferledger.core.errors import InferLedgerError

DEFAULT_DAYS = 7.0
DEFAULT_SEED = 1
MAX_DAYS = 90.0
STATE_FORMAT = 1
DAY_S = 86_400.0
SCRAPE_INTERVAL_S = 15.0  # the simulated scrapers' interval: live traffic starts on this grid


class DemoError(InferLedgerError):
    """The demo cannot run as asked; ``str(exc)`` says what to do."""

    http_status = 400


@dataclass(frozen=True)
class DemoOptions:
    db: Path
    host: str = "127.0.0.1"
    port: int = 8050
    days: float | None = None  # None: DEFAULT_DAYS, or what an existing database was built with
    seed: int | None = None
    rate_scale: float | None = None
    rebuild: bool = False
    log_level: str = "warning"

    def __post_init__(self) -> None:
        if self.days is not None and not 0 < self.days <= MAX_DAYS:
            raise DemoError(
                f"--days must be more than 0 and at most {MAX_DAYS:g}, got {self.days:g}"
            )
        if self.rate_scale is not None and not (
            math.isfinite(self.rate_scale) and 0 < self.rate_scale <= 100
        ):
            raise DemoError(
                f"--rate-scale must be more than 0 and at most 100, got {self.rate_scale:g}"
            )
        if not 1 <= self.port <= 65535:
            raise DemoError(f"--port must be from 1 to 65535, got {self.port}")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> DemoOptions:
        return cls(
            db=Path(args.db),
            host=args.host,
            port=args.port,
            days=args.days,
            seed=args.seed,
            rate_scale=args.rate_scale,
            rebuild=args.rebuild,
            log_level=args.log_level,
        )


@dataclass(frozen=True)
class Region:
    """A stretch of history still to load (Unix seconds); `end` is the start of that run's
    live traffic."""

    start: float
    end: float
    traces_done: bool = False


@dataclass
class DemoState:
    """What `<db>.demo.json` records about a demo database: how it was generated, and which
    history is not fully loaded yet (so an interrupted load is resumed, never mistaken for a
    complete one)."""

    path: Path
    seed: int = DEFAULT_SEED
    days: float = DEFAULT_DAYS
    rate_scale: float = 1.0
    workload: str = ""  # fingerprint of the workload and code that generated the data
    regions: list[Region] = field(default_factory=list)  # newest first
    live_until: float = 0.0  # every live span and scrape before this is stored
    spans: int = 0
    samples: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def status(self) -> str:
        return "loading" if self.regions else "complete"

    @classmethod
    def load(cls, path: Path) -> DemoState | None:
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise DemoError(f"{path} is unreadable ({exc}); pass --rebuild to start over") from None
        try:
            if doc["format"] != STATE_FORMAT:
                raise ValueError("format")
            return cls(
                path,
                seed=int(doc["seed"]),
                days=float(doc["days"]),
                rate_scale=float(doc["rate_scale"]),
                workload=str(doc["workload"]),
                regions=[
                    Region(float(r["start"]), float(r["end"]), bool(r["traces_done"]))
                    for r in doc["regions"]
                ],
                live_until=float(doc["live_until"]),
                spans=int(doc["spans"]),
                samples=int(doc["samples"]),
            )
        except (KeyError, TypeError, ValueError):
            raise DemoError(
                f"{path} is not a demo state file; pass --rebuild to start over"
            ) from None

    def save(self, **changes: Any) -> None:
        with self._lock:
            for name, value in changes.items():
                setattr(self, name, value)
            doc = {
                "format": STATE_FORMAT,
                "status": self.status,
                "seed": self.seed,
                "days": self.days,
                "rate_scale": self.rate_scale,
                "workload": self.workload,
                "regions": [
                    {"start": r.start, "end": r.end, "traces_done": r.traces_done}
                    for r in self.regions
                ],
                "live_until": self.live_until,
                "spans": self.spans,
                "samples": self.samples,
                "updated_at": datetime.now(UTC).isoformat(timespec="seconds"),
            }
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            os.replace(tmp, self.path)

    def add_counts(self, spans: int, samples: int) -> None:
        with self._lock:
            self.spans += spans
            self.samples += samples


def workload_fingerprint() -> str:
    """Changes when the shipped workload or InferLedger's version does: data generated by
    another version would not match what this one regenerates when it resumes a load."""
    text = resources.files("models").joinpath("data", "workload.yaml").read_bytes()
    return hashlib.sha256(text + __version__.encode()).hexdigest()[:16]


def state_path(db: Path) -> Path:
    return db.with_name(db.name + ".demo.json")


def remove_database(db: Path, spool_dir: Path) -> list[str]:
    """Delete a database, its WAL, its spool and its demo state; returns what was removed."""
    removed = []
    for p in (db, Path(f"{db}.wal"), state_path(db)):
        if p.exists():
            p.unlink()
            removed.append(str(p))
    if spool_dir.exists():
        shutil.rmtree(spool_dir)
        removed.append(str(spool_dir))
    return removed
