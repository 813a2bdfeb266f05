"""The waitress lifecycle both of our HTTP servers share (`serve` and `simulate --serve`).

waitress's asyncore loop runs in a background thread so the main thread can wait for a signal
and shut down in order: stop accepting, let requests in flight finish, then end the loop.
asyncore is not thread-safe, so sockets are closed from inside the loop thread through
waitress's trigger.

Slow clients (issue #17). waitress's only deadline is `channel_timeout`: it closes a
connection after that long *without any byte*, so a client that connects and sends nothing
holds a connection for minutes, and one that trickles a header byte now and then holds it for
ever; at `connection_limit` (100 by default) waitress stops accepting, and /healthz, the UI
and ingest all wait. waitress 3 has no header or request read deadline, so the runner runs
the loop itself and, between turns, sweeps the connections (:class:`Deadlines`):
- idle (nothing of a request received, nothing being served) past `header_timeout_s` since
  the last byte either way: closed (this is also the keep-alive timeout);
- a request whose header is not complete `header_timeout_s` after its first byte was seen,
  or whose body is not complete `request_timeout_s` after it: answered 408 and closed;
- at the connection limit, connections not in service (idle, or still sending a header) are
  closed oldest first, so that a flood of idle sockets cannot keep others out.
The loop uses poll(), not select(): select() fails on descriptors above 1023, which a
connection limit in the thousands reaches.

Streams and keep-alive. waitress closes the connection after every response it sends chunked
(HTTP/1.1 without Content-Length, i.e. every stream), a choice of its own: the last chunk ends
the body, and uvicorn keeps such connections open. `keep_alive_streams=True` does as uvicorn
does, unless the client asked to close or the response went wrong (an error, a disconnect, a
body cut short: waitress still closes then).

The task queue. Requests beyond the worker threads wait in waitress's queue, before the app
sees them (waitress logs "Task queue depth is N" on the `waitress.queue` logger then);
WaitressRunner counts them: `queued_now`, `queued_total`, `busy_threads`.
"""

from __future__ import annotations

import logging
import resource
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from waitress import create_server, wasyncore
from waitress.channel import HTTPChannel
from waitress.server import BaseWSGIServer
from waitress.task import ThreadedTaskDispatcher, WSGITask

log = logging.getLogger(__name__)

#: File descriptors kept for everything but client connections (database, spool, logs).
_FD_HEADROOM = 256
#: How often the loop sweeps the connections at most, in seconds.
_SWEEP_INTERVAL_S = 0.25
_TIMEOUT_RESPONSE = (
    b"HTTP/1.1 408 Request Timeout\r\nConnection: close\r\n"
    b"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 40\r\n\r\n"
    b"request not received in time; try again\n"
)


@dataclass(frozen=True)
class Deadlines:
    """How long a client may take to send its request (see the module's docstring)."""

    header_timeout_s: float = 10.0
    request_timeout_s: float = 120.0


def raise_fd_limit(connections: int) -> int:
    """Raise the soft open-files limit so `connections` sockets fit beside the rest; returns
    the connection limit that fits (lower than asked when the hard limit is lower): a server
    out of descriptors spins on accept() errors instead of refusing."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + _FD_HEADROOM
    if soft != resource.RLIM_INFINITY and soft < want:
        target = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    if soft != resource.RLIM_INFINITY and soft < want:
        fitting = max(10, soft - _FD_HEADROOM)
        log.warning(
            "open-files limit %d leaves room for %d connections, not %d; raise `ulimit -n`",
            soft,
            fitting,
            connections,
        )
        return fitting
    return connections


class _ChunkedKeepAliveTask(WSGITask):
    """A WSGI task that keeps an HTTP/1.1 connection open after a chunked response (see the
    module's docstring). waitress decides in build_response_header: it asks to close for a
    chunked body; that one request is declined, every other (the client's "Connection:
    close", a response without a body) goes through, as do the later ones (errors, a body
    shorter than its Content-Length)."""

    _building = False

    def build_response_header(self) -> bytes:
        self._building = True
        try:
            return super().build_response_header()
        finally:
            self._building = False

    def set_close_on_finish(self) -> None:
        if (
            self._building
            and self.chunked_response
            and not self.close_on_finish
            and self.version == "1.1"
        ):
            return
        super().set_close_on_finish()


class _KeepAliveChannel(HTTPChannel):
    task_class = _ChunkedKeepAliveTask


class _CountingDispatcher(ThreadedTaskDispatcher):
    """waitress's thread pool, counting the requests that found every thread busy."""

    def __init__(self) -> None:
        super().__init__()
        self.queued_total = 0

    def add_task(self, task: Any) -> None:
        with self.lock:
            idle = len(self.threads) - self.stop_count - self.active_count
            if len(self.queue) >= idle:
                self.queued_total += 1
        super().add_task(task)


class WaitressRunner:
    """One waitress server (one or several listeners) in a background loop thread."""

    def __init__(
        self,
        app: Callable[..., Any],
        deadlines: Deadlines | None = None,
        on_close: Callable[[str], object] | None = None,
        keep_alive_streams: bool = False,
        **adjustments: Any,
    ) -> None:
        """`deadlines` None keeps waitress's own behaviour (channel_timeout only);
        `on_close(reason)` counts the connections the deadlines close; `keep_alive_streams`
        keeps connections open after chunked responses (see the module's docstring)."""
        if "connection_limit" in adjustments:
            adjustments["connection_limit"] = raise_fd_limit(adjustments["connection_limit"])
        self._dispatcher = _CountingDispatcher()
        self._dispatcher.set_thread_count(int(adjustments.get("threads", 4)))
        self._server = create_server(app, _dispatcher=self._dispatcher, **adjustments)
        # A single listener is a TcpWSGIServer (its socket map is `_map`); several listeners
        # come as a MultiSocketServer (`map`).
        server = self._server
        self._socket_map = server.map if hasattr(server, "map") else server._map
        self._listeners = [d for d in self._socket_map.values() if isinstance(d, BaseWSGIServer)]
        if keep_alive_streams:
            for listener in self._listeners:
                listener.channel_class = _KeepAliveChannel
        self._deadlines = deadlines
        self._on_close = on_close or (lambda _reason: None)
        # When the sweep first saw each request still being received (waitress keeps no
        # start time); weak, so a finished request's entry goes with it.
        self._first_seen: weakref.WeakKeyDictionary[Any, float] = weakref.WeakKeyDictionary()
        self._next_sweep = 0.0
        adj = self._listeners[0].adj if self._listeners else None
        self._limit = adj.connection_limit if adj else 0
        self._loop_timeout = adj.asyncore_loop_timeout if adj else 1
        self._loop = threading.Thread(target=self._run, name="http-loop", daemon=True)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(str(d.effective_host), int(d.effective_port)) for d in self._listeners]

    @property
    def alive(self) -> bool:
        return self._loop.is_alive()

    @property
    def busy_threads(self) -> int:
        """Worker threads answering a request now."""
        return self._dispatcher.active_count

    @property
    def queued_now(self) -> int:
        """Requests waiting for a worker thread now (read before the app sees them)."""
        return len(self._dispatcher.queue)

    @property
    def queued_total(self) -> int:
        """Requests so far that found every worker thread busy and had to wait for one."""
        return self._dispatcher.queued_total

    def start(self) -> WaitressRunner:
        self._loop.start()
        return self

    def _run(self) -> None:
        """waitress's loop (server.run), one turn at a time so the sweep runs in between;
        at most `_SWEEP_INTERVAL_S` apart, since poll() wakes at least every loop timeout."""
        timeout = self._loop_timeout
        if self._deadlines is not None:
            timeout = min(timeout, _SWEEP_INTERVAL_S)
        try:
            while self._socket_map:
                wasyncore.loop(
                    timeout=timeout,
                    map=self._socket_map,
                    use_poll=True,
                    count=1,
                )
                if self._deadlines is not None:
                    now = time.time()  # waitress's last_activity is wall-clock time
                    if now >= self._next_sweep:
                        self._next_sweep = now + _SWEEP_INTERVAL_S
                        self._sweep(now, self._deadlines)
        except (SystemExit, KeyboardInterrupt):
            pass

    def _channels(self) -> list[HTTPChannel]:
        return [c for d in self._listeners for c in list(d.active_channels.values())]

    def _sweep(self, now: float, deadlines: Deadlines) -> None:
        """Close the connections past their deadlines (runs in the loop thread)."""
        waiting: list[tuple[float, HTTPChannel]] = []  # not in service: may be shed
        for channel in self._channels():
            if (
                channel.requests
                or channel.total_outbufs_len
                or channel.will_close
                or channel.close_when_flushed
            ):
                continue  # being served, answered or closed: the client is not the hold-up
            request = channel.request
            if request is None:
                if now - channel.last_activity > deadlines.header_timeout_s:
                    self._close(channel, "idle")
                else:
                    waiting.append((channel.last_activity, channel))
                continue
            started = self._first_seen.setdefault(request, now)
            if not request.headers_finished:
                if now - started > deadlines.header_timeout_s:
                    self._answer_timeout(channel, "header_timeout")
                else:
                    waiting.append((started, channel))
            elif now - started > deadlines.request_timeout_s:
                self._answer_timeout(channel, "request_timeout")
        # At the limit waitress stops accepting: make room (a tenth of the limit, so that
        # connections queued in the kernel's backlog get in within a few sweeps) by closing
        # the connections that have waited longest without a request, so a flood of idle
        # sockets cannot keep a health check (or anyone) out. Uploads and requests in
        # service are never shed.
        excess = len(self._socket_map) - self._limit + max(2, self._limit // 10)
        if excess > 0 and len(self._socket_map) >= self._limit:
            for _since, channel in sorted(waiting, key=lambda pair: pair[0])[:excess]:
                self._close(channel, "shed")

    def _close(self, channel: HTTPChannel, reason: str) -> None:
        channel.will_close = True  # the loop closes it on its next turn, as waitress does
        self._on_close(reason)

    def _answer_timeout(self, channel: HTTPChannel, reason: str) -> None:
        """408 and close. Safe from the loop thread: no task runs for this channel (its
        request is incomplete), as when waitress itself sends 100 Continue."""
        with channel.outbuf_lock:
            channel.outbufs[-1].append(_TIMEOUT_RESPONSE)
            channel.current_outbuf_count += len(_TIMEOUT_RESPONSE)
            channel.total_outbufs_len += len(_TIMEOUT_RESPONSE)
        channel.request = None  # read nothing more of it
        channel.close_when_flushed = True
        self._on_close(reason)

    def _in_loop(self, thunk: Callable[[], object]) -> None:
        trigger = self._listeners[0].trigger if self._listeners else None
        if trigger is not None and self._loop.is_alive():
            trigger.pull_trigger(thunk)
        else:
            thunk()

    def stop_accepting(self) -> None:
        """Close the listening sockets; connections already open keep being served. Uses the
        base close: waitress's own close() also closes the trigger we still need."""
        self._in_loop(lambda: [wasyncore.dispatcher.close(d) for d in self._listeners])

    def close(self) -> None:
        """End every connection and the loop, then the worker threads."""
        time.sleep(0.05)  # let the loop flush the last responses
        self._in_loop(lambda: wasyncore.close_all(self._socket_map))
        self._loop.join(5)
        if self._loop.is_alive():
            wasyncore.close_all(self._socket_map)
            self._loop.join(5)
        if hasattr(self._server, "task_dispatcher"):
            self._server.task_dispatcher.shutdown(timeout=5)


def wait_until(condition: Callable[[], bool], timeout_s: float, poll_s: float = 0.02) -> bool:
    """Poll ``condition`` until it holds or ``timeout_s`` passes; returns whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll_s)
    return True
