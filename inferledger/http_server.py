"""The waitress lifecycle both of our HTTP servers share (`serve` and `simulate --serve`).

waitress's asyncore loop runs in a background thread so the main thread can wait for a signal
and shut down in order: stop accepting, let requests in flight finish, then end the loop.
asyncore is not thread-safe, so sockets are closed from inside the loop thread through
waitress's trigger.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from waitress import create_server, wasyncore
from waitress.server import BaseWSGIServer


class WaitressRunner:
    """One waitress server (one or several listeners) in a background loop thread."""

    def __init__(self, app: Callable[..., Any], **adjustments: Any) -> None:
        self._server = create_server(app, **adjustments)
        # A single listener is a TcpWSGIServer (its socket map is `_map`); several listeners
        # come as a MultiSocketServer (`map`).
        server = self._server
        self._socket_map = server.map if hasattr(server, "map") else server._map
        self._listeners = [d for d in self._socket_map.values() if isinstance(d, BaseWSGIServer)]
        self._loop = threading.Thread(target=server.run, name="http-loop", daemon=True)

    @property
    def addresses(self) -> list[tuple[str, int]]:
        return [(str(d.effective_host), int(d.effective_port)) for d in self._listeners]

    @property
    def alive(self) -> bool:
        return self._loop.is_alive()

    def start(self) -> WaitressRunner:
        self._loop.start()
        return self

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
