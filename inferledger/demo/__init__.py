"""`inferledger demo`: a week of a simulated company's LLM traffic, through the real ingest path.

It starts the real service (the one `inferledger serve` runs) on a real HTTP port, then feeds it
what a company with four internal apps, two vLLM deployments and a hosted fallback would send
(models/data/workload.yaml, docs/demo.md):

- traces: the apps' spans and vLLM's `llm_request` spans, POSTed as OTLP protobuf to /v1/traces
  by several concurrent senders, a few thousand spans per request;
- metrics: every engine's vLLM /metrics page and every GPU node's dcgm-exporter page, rendered
  every 15 s of simulated time and stored through Scraper.ingest_text with the scrape's own
  (historical) timestamp: the same parser and writes as a live scrape.

The dashboard is served at once. History loads in the background, newest first: first the
traces of every day (a few minutes for a week), then the metrics. The metrics dominate: storing
one vLLM page through the scrape path costs ~8 ms (prometheus_client's parser, then the write),
and a week holds ~40,000 scrapes per engine, far more than two minutes of work on a small
machine (docs/demo.md has the measured timings). Live traffic starts at the same time: the
simulation of the newest history day runs on into the first live hour, and from then on each
day is simulated ahead and released as the wall clock passes it.

Re-running reuses the database and backfills the time it was not running; --rebuild starts
over. `<db>.demo.json` beside the database records how it was generated and which history is
not loaded yet: a run stopped half-way leaves the database marked incomplete, and the next run
finishes the load (every segment regenerates identically from the seed; a span sent twice is
stored once, and a scrape already stored is skipped).

The modules, each importing only those above it in this list:
    state.py     options, the state file, the time grid, DemoError
    progress.py  the history load's progress bar
    senders.py   SpanSender (OTLP over HTTP), MetricReplayer (the scrape path), Feed
    history.py   HistoryLoader: the days before this run, resumable
    live.py      LiveFeeder: traffic as the wall clock passes it
    runner.py    Demo: the service, its port, the two feeding threads, start and stop
    command.py   the `inferledger demo` parser and `run`
    __main__.py  `python -m inferledger.demo` (through inferledger.cli)

Importing this package stays light (the CLI imports it to build its parser): the service,
the simulator and `requests` load when a demo starts.
"""

from inferledger.demo.command import DEFAULT_DB, add_parser, run
from inferledger.demo.progress import Progress
from inferledger.demo.runner import Demo
from inferledger.demo.state import (
    DAY_S,
    DEFAULT_DAYS,
    DEFAULT_SEED,
    MAX_DAYS,
    SCRAPE_INTERVAL_S,
    DemoError,
    DemoOptions,
    DemoState,
    Region,
    state_path,
)

__all__ = [
    "DAY_S",
    "DEFAULT_DAYS",
    "DEFAULT_DB",
    "DEFAULT_SEED",
    "MAX_DAYS",
    "SCRAPE_INTERVAL_S",
    "Demo",
    "DemoError",
    "DemoOptions",
    "DemoState",
    "Progress",
    "Region",
    "add_parser",
    "run",
    "state_path",
]
