"""The history load's progress: a one-line bar on a terminal, a line every few seconds
elsewhere (a log, a pipe), and the short durations the demo prints."""

from __future__ import annotations

import threading
import time
from typing import TextIO


class Progress:
    """A one-line progress bar on a terminal; a line every few seconds elsewhere."""

    WIDTH = 24

    def __init__(self, stream: TextIO, total_units: float) -> None:
        self.stream = stream
        self.tty = bool(getattr(stream, "isatty", lambda: False)())
        self.total = max(total_units, 1e-9)
        self.done = 0.0
        self.phase = "traces"
        self.spans = 0
        self.samples = 0
        self.started = time.monotonic()
        self._last = 0.0
        self._lock = threading.Lock()

    def advance(self, units: float = 0.0, *, spans: int = 0, samples: int = 0) -> None:
        with self._lock:
            self.done = min(self.total, self.done + units)
            self.spans += spans
            self.samples += samples
        self.draw()

    def draw(self, force: bool = False) -> None:
        with self._lock:  # called from the sender threads too
            self._draw(force)

    def _draw(self, force: bool) -> None:
        now = time.monotonic()
        if not force and now - self._last < (0.25 if self.tty else 10.0):
            return
        self._last = now
        frac = self.done / self.total
        filled = int(frac * self.WIDTH)
        bar = "█" * filled + "░" * (self.WIDTH - filled)
        elapsed = now - self.started
        eta = ""
        if 0.02 < frac < 1:
            eta = f"  ~{duration(elapsed * (1 - frac) / frac)} left"
        text = (
            f"history {bar} {frac:4.0%}  {self.phase}  {self.spans:,} spans  "
            f"{self.samples:,} samples  {duration(elapsed)}{eta}"
        )
        if self.tty:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def finish(self, message: str) -> None:
        with self._lock:
            if self.tty:
                self.stream.write("\r\033[K")
            self.stream.write(message + "\n")
            self.stream.flush()


def duration(seconds: float) -> str:
    """`42s`, `3m07s`, `2h05m`."""
    seconds = int(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
