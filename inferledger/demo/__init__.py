"""`inferledger demo`: a week of a simulated company's LLM traffic, through the real ingest path.

It starts the real service (the one `inferledger serve` runs) on a real HTTP port, then feeds it
what a company with four internal apps, two vLLM deployments and a hosted fallback would send
(models/data/workload.yaml, docs/demo.md):

- traces: the apps' spans and vLLM's `llm_request` spans, POSTed as OTLP protobuf to /v1/traces
  by several concurrent senders, a few thousand spans per request;
- metrics: every engine's vLLM /metrics page and every GPU node's dcgm-exporter page as a
  scrape would see it. Live scrapes are stored through Scraper.ingest_text (prometheus_client's
  parser, the writes of a live scrape). History is stored in bulk: each page is read into rows
  by the page template (ingest/prom_text.py PageTemplate: rows identical to the parser's, which
  it falls back to) and an hour of scrapes goes in one write (Scraper.store_scrapes), at 15 s
  for the newest 3 hours and 60 s before that.

The dashboard is served at once. History loads in the background, newest day first: the newest
day (shared with the first live hour) is simulated in this process, older days in worker
processes (batches.py), so the simulation uses the other core while this one ingests. The load
writes its progress to the database (ledger/load_status.py) and clears its `loading` flag once
the cost marts are refreshed over the whole history (docs/demo.md has the measured timings).
Live traffic starts at the same time: the simulation of the newest history day runs on into the
first live hour, and from then on each day is simulated ahead and released as the wall clock
passes it.

Re-running reuses the database and backfills the time it was not running; --rebuild starts
over. `<db>.demo.json` beside the database records how it was generated and which history is
not loaded yet: a run stopped half-way leaves the database marked incomplete, and the next run
finishes the load (every segment regenerates identically from the seed; a span sent twice is
stored once, and a scrape already stored is skipped).

The modules, each importing only those above it in this list:
    state.py     options, the state file, the time grid, DemoError
    progress.py  the history load's progress bar
    senders.py   SpanSender (OTLP over HTTP), MetricReplayer (the scrape path), Feed
    batches.py   a history segment as OTLP bodies and scrape rows (run in worker processes)
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
