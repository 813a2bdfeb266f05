"""A free TCP port on the loopback interface, for servers started by the demo's screenshots,
the benchmarks and the tests (one definition; they used to carry four copies)."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (another process may take it before it is bound:
    callers bind at once)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
