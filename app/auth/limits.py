"""Limits on failed sign-ins (docs/security.md, "Failed sign-ins"), in memory.

Two limits, both independent of the client's address (issue #17: 30 user names in 1.5 s were
all answered, and each new address got a fresh budget; behind a proxy every client has the
proxy's address anyway):

- **per account**: after ``max_failures`` failed sign-ins for one user name, the name is
  locked for ``lockout_s``, doubling with each further failure up to ``max_lockout_s``. Any
  name typed counts, existing or not, so a lock tells nothing about which names exist.
  Failures are forgotten at a successful sign-in or a day after the last one.
- **per server**: at most ``global_failures`` failed sign-ins in any ``global_window_s``
  across all names and addresses; past it every password sign-in waits until the oldest
  failure leaves the window (spraying many names from many addresses is throttled).

A refused attempt checks no password (an scrypt hash costs ~35 ms) and does not count. An
attempt is counted *before* its password is checked and uncounted when it succeeds, so
concurrent attempts cannot all slip in under a limit while their hashes run.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

MAX_FAILURES = 5
LOCKOUT_S = 60.0
MAX_LOCKOUT_S = 900.0
GLOBAL_FAILURES = 20
GLOBAL_WINDOW_S = 60.0
#: Failures of a name are forgotten this long after its last one: long enough that a lock
#: that has run out does not hand out a fresh set of free attempts.
FORGET_AFTER_S = 86_400.0


@dataclass(frozen=True)
class Refusal:
    """Why a sign-in attempt is refused before any password is checked."""

    scope: str  # "account" (this user name) or "server" (all sign-ins)
    retry_after_s: float

    @property
    def seconds(self) -> int:
        """Whole seconds to wait (for Retry-After and the message), at least 1."""
        return max(1, math.ceil(self.retry_after_s))

    @property
    def message(self) -> str:
        if self.scope == "account":
            return f"Too many failed sign-ins for this user name; try again in {self.seconds} s."
        return f"Too many failed sign-ins on this server; try again in {self.seconds} s."


@dataclass
class _Account:
    failures: int = 0
    last_failure: float = 0.0
    locked_until: float = 0.0


class SignInThrottle:
    """Failed sign-ins per user name (exponential backoff) and per server (sliding window).

    At most `max_keys` names are kept (the least recently failed go first), so a flood of
    made-up names cannot grow memory without bound."""

    def __init__(
        self,
        *,
        max_failures: int = MAX_FAILURES,
        lockout_s: float = LOCKOUT_S,
        max_lockout_s: float = MAX_LOCKOUT_S,
        global_failures: int = GLOBAL_FAILURES,
        global_window_s: float = GLOBAL_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = 10_000,
    ) -> None:
        self.max_failures = max_failures
        self.lockout_s = lockout_s
        self.max_lockout_s = max(max_lockout_s, lockout_s)
        self.global_failures = global_failures
        self.global_window_s = global_window_s
        self._clock = clock
        self._max_keys = max_keys
        self._accounts: OrderedDict[str, _Account] = OrderedDict()
        self._recent: deque[float] = deque()  # times of failures in the global window
        self._lock = threading.Lock()

    @staticmethod
    def key(name: str) -> str:
        """The account a typed name counts against: 'Vic ' and 'vic' are one account."""
        return name.strip().lower()[:254]

    def begin(self, name: str) -> Refusal | None:
        """Before checking a password: a Refusal, or None after counting the attempt as a
        failure (call :meth:`succeeded` when the password was right)."""
        key = self.key(name)
        with self._lock:
            now = self._clock()
            while self._recent and self._recent[0] <= now - self.global_window_s:
                self._recent.popleft()
            account = self._accounts.get(key)
            if account is not None and now - account.last_failure > FORGET_AFTER_S:
                account = None
                del self._accounts[key]
            if account is not None and account.locked_until > now:
                return Refusal("account", account.locked_until - now)
            if len(self._recent) >= self.global_failures:
                return Refusal("server", self._recent[0] + self.global_window_s - now)
            self._recent.append(now)
            if account is None:
                account = self._accounts[key] = _Account()
            account.failures += 1
            account.last_failure = now
            if account.failures >= self.max_failures:
                doublings = min(account.failures - self.max_failures, 32)
                lock = min(self.max_lockout_s, self.lockout_s * 2**doublings)
                account.locked_until = now + lock
            self._accounts.move_to_end(key)
            while len(self._accounts) > self._max_keys:
                self._accounts.popitem(last=False)
            return None

    def succeeded(self, name: str) -> None:
        """The attempt :meth:`begin` counted had the right password: uncount it and forget
        the name's failures."""
        with self._lock:
            self._accounts.pop(self.key(name), None)
            if self._recent:
                # The newest entry, not necessarily this attempt's own: close enough, as they
                # differ by the time of one password check.
                self._recent.pop()

    def failures(self, name: str) -> int:
        """Failed sign-ins counted for a name (for the log)."""
        with self._lock:
            account = self._accounts.get(self.key(name))
            return account.failures if account else 0
