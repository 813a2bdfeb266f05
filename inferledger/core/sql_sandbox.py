"""The SQL console's sandbox (issue #14): analyst SQL runs in worker processes, never in the
service's own DuckDB.

Each worker is a separate Python process (``python -m inferledger.core.sql_sandbox``) that opens
the console's snapshot file read-only and runs one statement at a time. The layers, outermost
first, each enough on its own for most attacks:

1. the parent refuses SQL longer than ``max_sql_chars`` before a worker sees it;
2. the worker refuses invisible or bidirectional-control characters (Trojan-Source style tricks);
3. DuckDB's own parser (``duckdb.extract_statements``) must find exactly one statement, of type
   SELECT (which covers WITH, VALUES, FROM-first, DESCRIBE, SHOW and SUMMARIZE);
4. the statement's parse tree (``json_serialize_sql``) must not name a function that reads files
   or runs other SQL (``read_csv``, ``glob``, ``query``, ``checkpoint`` ...) nor a table that is a
   path or URL;
5. the connection itself: the snapshot opened ``read_only``, ``enable_external_access=false``
   (no file, network or ATTACH), extension autoload/autoinstall off, no temp directory (nothing
   spills to disk), ``memory_limit``, ``threads=1``, then ``lock_configuration=true`` so no SET
   can undo any of it (https://duckdb.org/docs/2.0/operations_manual/securing_duckdb/overview.html);
6. the process: the lowest CPU priority (nice 19, SCHED_IDLE) so ingest keeps its cores, an
   address-space cap, an environment with no secrets, and a time limit enforced twice: the worker
   interrupts its own query (``interrupt()``) at the limit, and the parent kills the worker if no
   answer came a grace period later, then starts a fresh one for the next query.

Rows and bytes of a result are bounded; a truncated result says so. Every refusal carries a
reason the UI shows. Only this module and the storage backend import DuckDB.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import struct
import subprocess
import sys
import threading
import time
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa

#: What a result can be: rows ("ok"), a refusal before running ("refused"), an engine error
#: ("error"), stopped at the time limit ("timeout"), over the memory cap ("memory"), a worker
#: killed or crashed ("killed"), or every worker busy past the queue wait ("busy").
KINDS = ("ok", "refused", "error", "timeout", "memory", "killed", "busy")


@dataclass(frozen=True)
class SandboxLimits:
    """The console's limits (settings console.*)."""

    timeout_s: float = 10.0
    max_rows: int = 10_000
    max_result_bytes: int = 32 << 20
    max_sql_chars: int = 100_000
    memory_limit: str = "512MB"
    #: address-space cap of a worker process, bytes (a backstop under DuckDB's memory_limit)
    address_space_bytes: int = 4 << 30
    kill_grace_s: float = 3.0
    queue_wait_s: float = 30.0
    #: the workers' CPU priority: the lowest, so ingest and the UI keep their cores
    nice: int = 19


@dataclass(frozen=True)
class SandboxResult:
    """One query's outcome. ``table`` holds the rows when ``kind`` is "ok"."""

    kind: str
    reason: str = ""
    table: pa.Table | None = None
    truncated: bool = False
    truncated_reason: str = ""
    elapsed_s: float = 0.0
    statement_type: str = ""

    @property
    def ok(self) -> bool:
        return self.kind == "ok"

    @property
    def rows(self) -> int:
        return self.table.num_rows if self.table is not None else 0


# --------------------------------------------------------------------------- checks
#: Characters that change how SQL reads without being seen: zero-width, joiners, bidi
#: embeddings, overrides and isolates, the BOM, soft hyphen (all Unicode category Cf), and
#: control characters other than tab and newlines (category Cc).
_ALLOWED_CONTROLS = frozenset("\t\n\r")

#: Functions the console refuses by name: they read files or directories, run other SQL
#: (query, query_table), touch the database file (checkpoint) or secrets.
DENIED_FUNCTIONS = frozenset(
    {
        "glob",
        "sniff_csv",
        "query",
        "query_table",
        "checkpoint",
        "force_checkpoint",
        "duckdb_secrets",
        "which_secret",
        "getenv",
        "load_extension",
        "install_extension",
        "duckdb_extensions",
        "duckdb_temporary_files",
        "enable_profiling",
    }
)
#: ... and by prefix: file readers and other engines' scanners.
DENIED_PREFIXES = (
    "read_",
    "parquet_",
    "csv_",
    "json_execute",
    "iceberg_",
    "delta_",
    "sqlite_",
    "postgres_",
    "mysql_",
    "ducklake_",
    "http",
    "s3",
    "pragma_",
)


def check_characters(sql: str) -> str | None:
    """A refusal reason when `sql` holds an invisible or control character, else None."""
    for i, ch in enumerate(sql):
        category = unicodedata.category(ch)
        if category == "Cf" or (category == "Cc" and ch not in _ALLOWED_CONTROLS):
            name = unicodedata.name(ch, f"U+{ord(ch):04X}")
            return (
                f"the query holds an invisible or control character ({name}, U+{ord(ch):04X}) at "
                f"position {i + 1}: such characters can make SQL read differently from what runs; "
                "remove it"
            )
    return None


def _walk(node: Any) -> Iterator[dict[str, Any]]:
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def check_tree(tree: dict[str, Any]) -> str | None:
    """A refusal reason when a SELECT's parse tree (json_serialize_sql) calls a denied
    function or reads a table named like a file or URL, else None."""
    for node in _walk(tree):
        name = node.get("function_name")
        if isinstance(name, str):
            lowered = name.lower()
            if lowered in DENIED_FUNCTIONS or lowered.startswith(DENIED_PREFIXES):
                return (
                    f"the function {name}() is not available in the console: it reads files, "
                    "runs other SQL or touches the database; the console reads the snapshot's "
                    "views only"
                )
        if node.get("type") == "BASE_TABLE":
            table = str(node.get("table_name", ""))
            if any(ch in table for ch in "/\\:.") or table.lower().startswith(("http", "s3")):
                return (
                    f"the table name {table!r} looks like a file or URL: the console reads the "
                    "snapshot's views only, never files or the network"
                )
    return None


# --------------------------------------------------------------------------- the worker
def _read_frame(stream: BinaryIO) -> bytes | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    (size,) = struct.unpack(">I", head)
    body = stream.read(size)
    return body if len(body) == size else None


def _write_frame(stream: BinaryIO, header: dict[str, Any], payload: bytes = b"") -> None:
    data = json.dumps({**header, "payload": len(payload)}).encode("utf-8")
    stream.write(struct.pack(">I", len(data)) + data + payload)
    stream.flush()


class _Worker:
    """The worker process's side: one connection per snapshot file, one query at a time."""

    def __init__(self, memory_limit: str) -> None:
        import duckdb

        self.duckdb = duckdb
        self.memory_limit = memory_limit
        self.conn: Any = None
        self.opened: tuple[str, int, int] | None = None
        # A connection of its own for json_serialize_sql: parsing never touches the snapshot.
        self.parser = self._lock_down(duckdb.connect(":memory:", config=self._config()))

    def _config(self) -> dict[str, Any]:
        return {
            "enable_external_access": False,
            "autoload_known_extensions": False,
            "autoinstall_known_extensions": False,
            "allow_community_extensions": False,
            "allow_unsigned_extensions": False,
            "memory_limit": self.memory_limit,
            "threads": 1,
            # nothing spills to disk: an over-large sort or join fails with out of memory
            "temp_directory": "",
        }

    @staticmethod
    def _lock_down(conn: Any) -> Any:
        # After every other setting: from here on no SET, RESET or PRAGMA can change any.
        conn.execute("SET lock_configuration = true")
        return conn

    def connection(self, path: str) -> Any:
        st = os.stat(path)
        key = (path, st.st_ino, st.st_mtime_ns)
        if self.conn is None or self.opened != key:
            if self.conn is not None:
                self.conn.close()
                self.conn = None
            self.conn = self._lock_down(
                self.duckdb.connect(path, read_only=True, config=self._config())
            )
            self.opened = key
        return self.conn

    def check(self, sql: str) -> tuple[str, str, str]:
        """(kind, reason, statement type); kind "" when the statement may run."""
        reason = check_characters(sql)
        if reason:
            return "refused", reason, ""
        try:
            statements = self.duckdb.extract_statements(sql)
        except self.duckdb.Error as exc:
            return "error", f"syntax error: {_one_line(exc)}", ""
        if not statements:
            return "refused", "the query is empty: write one SELECT statement", ""
        if len(statements) > 1:
            kinds = ", ".join(_type_name(s.type) for s in statements[:5])
            return (
                "refused",
                f"one statement at a time: found {len(statements)} ({kinds}); remove the others",
                "",
            )
        kind = _type_name(statements[0].type)
        if kind != "SELECT":
            return (
                "refused",
                f"{kind} statements are not allowed: the console only reads (SELECT, WITH, "
                "VALUES, FROM, DESCRIBE, SHOW, SUMMARIZE)",
                kind,
            )
        try:
            raw = self.parser.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0]
            tree = json.loads(raw)
        except (self.duckdb.Error, ValueError, TypeError) as exc:
            return "refused", f"the query could not be checked: {_one_line(exc)}", kind
        if tree.get("error"):
            return (
                "refused",
                "the query could not be checked: " + str(tree.get("error_message", "")),
                kind,
            )
        reason = check_tree(tree)
        if reason:
            return "refused", reason, kind
        return "", "", kind

    def run(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        sql = str(request["sql"])
        started = time.perf_counter()
        kind, reason, stype = self.check(sql)
        if kind:
            return {"kind": kind, "reason": reason, "statement_type": stype}, b""
        conn = self.connection(str(request["db"]))
        timeout_s = float(request["timeout_s"])
        timer = threading.Timer(timeout_s, conn.interrupt)
        timer.daemon = True
        timer.start()
        try:
            header, payload = self._fetch(conn, sql, request)
        except self.duckdb.InterruptException:
            header, payload = (
                {
                    "kind": "timeout",
                    "reason": f"the query ran longer than {timeout_s:g} s and was stopped; "
                    "narrow it (a WHERE on time, fewer joins) or aggregate first",
                },
                b"",
            )
        except self.duckdb.OutOfMemoryException as exc:
            header, payload = (
                {
                    "kind": "memory",
                    "reason": f"the query needs more memory than the console allows "
                    f"({self.memory_limit}): {_one_line(exc, 200)}",
                },
                b"",
            )
        except self.duckdb.PermissionException as exc:
            header, payload = (
                {"kind": "refused", "reason": f"not permitted: {_one_line(exc)}"},
                b"",
            )
        except self.duckdb.Error as exc:
            header, payload = {"kind": "error", "reason": _one_line(exc)}, b""
        except MemoryError:
            header, payload = (
                {"kind": "memory", "reason": "the result does not fit the console's memory"},
                b"",
            )
        finally:
            timer.cancel()
        header["statement_type"] = stype
        header["elapsed_s"] = time.perf_counter() - started
        return header, payload

    def _fetch(self, conn: Any, sql: str, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        max_rows = int(request["max_rows"])
        max_bytes = int(request["max_bytes"])
        reader = conn.execute(sql).to_arrow_reader(1024)
        batches: list[pa.RecordBatch] = []
        rows = size = 0
        truncated = ""
        for batch in reader:
            if rows + batch.num_rows > max_rows:
                batch = batch.slice(0, max_rows - rows)
                truncated = f"only the first {max_rows:,} rows are shown (the console's row cap)"
            if size + batch.nbytes > max_bytes:
                truncated = (
                    f"only the first {rows:,} rows are shown: the result is over "
                    f"{max_bytes / 1e6:g} MB"
                )
                break
            batches.append(batch)
            rows += batch.num_rows
            size += batch.nbytes
            if truncated:
                break
        schema = reader.schema
        reader.close()
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, schema) as writer:
            for batch in batches:
                writer.write_batch(batch)
        return (
            {"kind": "ok", "truncated": bool(truncated), "truncated_reason": truncated},
            sink.getvalue().to_pybytes(),
        )


def _type_name(stype: Any) -> str:
    return str(getattr(stype, "name", stype)).split(".")[-1].upper()


def _one_line(exc: BaseException, limit: int = 400) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def worker_main() -> int:
    """The worker process: requests on stdin, answers on stdout, until stdin closes (the
    parent went away)."""
    import resource

    limits = json.loads(os.environ.get("INFERLEDGER_SANDBOX", "{}"))
    os.nice(int(limits.get("nice", 19)))
    # SCHED_IDLE: the worker runs only on CPU time nothing else wants, so heavy queries cannot
    # take it from ingest. (It stays in the service's session: a session of its own would be a
    # scheduler autogroup of its own, which gets a fair share whatever its nice value.)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    cap = int(limits.get("address_space_bytes", 0))
    if cap:
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    # Nothing else may write to the answer channel.
    sys.stdout = sys.stderr
    worker = _Worker(str(limits.get("memory_limit", "512MB")))
    _write_frame(stdout, {"kind": "ready"})
    while True:
        frame = _read_frame(stdin)
        if frame is None:
            return 0
        try:
            header, payload = worker.run(json.loads(frame))
        except Exception as exc:  # anything unforeseen answers as an error; the worker lives on
            header, payload = {"kind": "error", "reason": _one_line(exc)}, b""
        _write_frame(stdout, header, payload)


# --------------------------------------------------------------------------- the parent
class _Process:
    """The parent's handle on one worker process."""

    def __init__(self, limits: SandboxLimits) -> None:
        root = str(Path(__file__).resolve().parents[2])
        env = {
            # no secrets: the worker sees no INFERLEDGER_* value nor anything else of ours
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "PYTHONPATH": root,
            "LANG": "C.UTF-8",
            "HOME": "/nonexistent",
            "INFERLEDGER_SANDBOX": json.dumps(
                {
                    "nice": limits.nice,
                    "memory_limit": limits.memory_limit,
                    "address_space_bytes": limits.address_space_bytes,
                }
            ),
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "inferledger.core.sql_sandbox"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd="/",
            close_fds=True,
        )
        ready = self.read(time.monotonic() + 60.0)
        if ready is None or ready[0].get("kind") != "ready":
            self.kill()
            raise RuntimeError("the SQL console's worker did not start")

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, request: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        data = json.dumps(request).encode("utf-8")
        self.proc.stdin.write(struct.pack(">I", len(data)) + data)
        self.proc.stdin.flush()

    def _read_exact(self, n: int, deadline: float) -> bytes | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        chunks: list[bytes] = []
        left = n
        while left:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], wait)
            if not ready:
                return None
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError("worker exited")
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    def read(self, deadline: float) -> tuple[dict[str, Any], bytes] | None:
        """The next answer, or None when the deadline passes first; EOFError if it died."""
        head = self._read_exact(4, deadline)
        if head is None:
            return None
        (size,) = struct.unpack(">I", head)
        body = self._read_exact(size, deadline + 30.0)
        if body is None:
            return None
        header = json.loads(body)
        payload = self._read_exact(int(header.get("payload", 0)), deadline + 30.0)
        if payload is None:
            return None
        return header, payload

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()  # SIGKILL: a hung query gets no say
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()


@dataclass
class _Slot:
    process: _Process | None = None
    queries: int = 0
    restarts: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class SandboxPool:
    """A small pool of worker processes with a queue: one query per worker at a time. A killed
    or crashed worker is replaced at its next query, transparently."""

    def __init__(
        self,
        db_path: Callable[[], str],
        limits: SandboxLimits | None = None,
        size: int = 2,
    ) -> None:
        self.limits = limits or SandboxLimits()
        self._db_path = db_path
        self._slots: queue.Queue[_Slot] = queue.Queue()
        self._all = [_Slot() for _ in range(max(1, size))]
        for slot in self._all:
            self._slots.put(slot)
        self._closed = False

    @property
    def size(self) -> int:
        return len(self._all)

    def worker_pids(self) -> list[int]:
        """The live workers' process ids (tests, the page's status line)."""
        return [s.process.pid for s in self._all if s.process is not None and s.process.alive()]

    @property
    def restarts(self) -> int:
        return sum(s.restarts for s in self._all)

    def run(self, sql: str) -> SandboxResult:
        """Run one statement in a worker; never raises for anything the SQL does."""
        started = time.perf_counter()
        if len(sql) > self.limits.max_sql_chars:
            return SandboxResult(
                "refused",
                f"the query is {len(sql):,} characters long; the console takes at most "
                f"{self.limits.max_sql_chars:,}",
            )
        if not sql.strip():
            return SandboxResult("refused", "the query is empty: write one SELECT statement")
        if self._closed:
            return SandboxResult("busy", "the SQL console is shut down")
        try:
            slot = self._slots.get(timeout=self.limits.queue_wait_s)
        except queue.Empty:
            return SandboxResult(
                "busy",
                f"every console worker ({self.size}) stayed busy for "
                f"{self.limits.queue_wait_s:g} s; try again shortly",
            )
        try:
            result = self._run_in(slot, sql)
        finally:
            self._slots.put(slot)
        return SandboxResult(
            result.kind,
            result.reason,
            result.table,
            result.truncated,
            result.truncated_reason,
            time.perf_counter() - started,
            result.statement_type,
        )

    def _run_in(self, slot: _Slot, sql: str) -> SandboxResult:
        path = self._db_path()
        if not path or not Path(path).exists():
            return SandboxResult("error", "no snapshot yet: refresh the snapshot first")
        if slot.process is None or not slot.process.alive():
            if slot.process is not None:
                slot.process.kill()
                slot.restarts += 1
            try:
                slot.process = _Process(self.limits)
            except (OSError, RuntimeError) as exc:
                slot.process = None
                return SandboxResult("error", f"the console's worker did not start: {exc}")
        proc = slot.process
        request = {
            "sql": sql,
            "db": path,
            "timeout_s": self.limits.timeout_s,
            "max_rows": self.limits.max_rows,
            "max_bytes": self.limits.max_result_bytes,
        }
        slot.queries += 1
        hard_limit = self.limits.timeout_s + self.limits.kill_grace_s
        try:
            proc.send(request)
            answer = proc.read(time.monotonic() + hard_limit)
        except (OSError, EOFError, ValueError):
            proc.kill()
            slot.process = None
            slot.restarts += 1
            return SandboxResult(
                "killed",
                "the console's worker stopped while running this query (most likely over its "
                "memory cap); a fresh worker takes the next query",
            )
        if answer is None:
            proc.kill()
            slot.process = None
            slot.restarts += 1
            return SandboxResult(
                "killed",
                f"the query did not stop within {hard_limit:g} s, so its worker was killed "
                "and replaced",
            )
        header, payload = answer
        table = None
        if header.get("kind") == "ok":
            table = pa.ipc.open_stream(payload).read_all()
        return SandboxResult(
            str(header.get("kind", "error")),
            str(header.get("reason", "")),
            table,
            bool(header.get("truncated")),
            str(header.get("truncated_reason", "")),
            float(header.get("elapsed_s", 0.0)),
            str(header.get("statement_type", "")),
        )

    def close(self) -> None:
        """Stop every worker (queries in flight end with the worker)."""
        self._closed = True
        for slot in self._all:
            if slot.process is not None:
                slot.process.kill()
                slot.process = None


if __name__ == "__main__":
    sys.exit(worker_main())
