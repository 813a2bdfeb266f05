"""The router (global scheduler): which replica serves each arriving request.

Strategies are small classes chosen from a registry by RouterPolicy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from models.serving.config import RouterPolicy
from models.serving.request import Request


class RoutedReplica(Protocol):
    @property
    def num_outstanding(self) -> int: ...


class Router(Protocol):
    def route(self, request: Request) -> int:
        """Index of the replica that gets the request."""
        ...


class RoundRobinRouter:
    """Replicas in turn, whatever their load."""

    def __init__(self, replicas: Sequence[RoutedReplica]) -> None:
        self._n = len(replicas)
        self._next = 0

    def route(self, request: Request) -> int:
        i = self._next
        self._next = (i + 1) % self._n
        return i


class LeastOutstandingRequestsRouter:
    """The replica with the fewest requests sent and not finished; ties go to the lowest
    index."""

    def __init__(self, replicas: Sequence[RoutedReplica]) -> None:
        self._replicas = list(replicas)

    def route(self, request: Request) -> int:
        best = 0
        best_load = self._replicas[0].num_outstanding
        for i in range(1, len(self._replicas)):
            load = self._replicas[i].num_outstanding
            if load < best_load:
                best, best_load = i, load
        return best


ROUTERS: dict[RouterPolicy, type[RoundRobinRouter] | type[LeastOutstandingRequestsRouter]] = {
    RouterPolicy.ROUND_ROBIN: RoundRobinRouter,
    RouterPolicy.LEAST_OUTSTANDING_REQUESTS: LeastOutstandingRequestsRouter,
}


def make_router(policy: RouterPolicy, replicas: Sequence[RoutedReplica]) -> Router:
    return ROUTERS[policy](replicas)
