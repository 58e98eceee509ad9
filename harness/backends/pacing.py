"""How many requests a served model gets at once: as many as it answers without pushing back, never more than
--concurrency (additive increase, multiplicative decrease, as TCP paces a connection).

Every request waits for a slot. A request the server answers grows the limit by one slot per limit's worth of
answers; one it pushes back (429 Too Many Requests, 503 Unavailable, a timeout) halves it, once per window (the
refusals of requests sent before the last halving are one signal, not many), never below one. The limit is traced
as it changes (seconds since the first request, the new limit, why), and the trace goes into run.json.
"""

from __future__ import annotations

import threading
import time

TRACE_LENGTH = 2000  # changes kept: a long run keeps its last ones


class AdaptiveLimit:
    def __init__(self, ceiling: int, start: int = 4):
        self.ceiling = ceiling
        self.limit = float(min(ceiling, start))
        self.in_flight = 0
        self._tickets = 0  # requests sent so far
        self._cut_at = 0  # the ticket of the first request sent after the last halving
        self._condition = threading.Condition()
        self._started = time.monotonic()
        self.trace: list[tuple[float, int, str]] = [(0.0, int(self.limit), "start")]

    def acquire(self) -> int:
        """Wait for a slot under the current limit; the request's ticket, to give back with it."""
        with self._condition:
            while self.in_flight >= int(self.limit):
                self._condition.wait(timeout=1.0)
            self.in_flight += 1
            self._tickets += 1
            return self._tickets

    def release(self, ticket: int, outcome: str) -> None:
        """Give the slot back: ``answered``, ``pushed back`` (429, 503, a timeout) or ``failed`` (anything else,
        which says nothing about the server's load)."""
        with self._condition:
            self.in_flight -= 1
            before = int(self.limit)
            if outcome == "answered":
                self.limit = min(float(self.ceiling), self.limit + 1.0 / self.limit)
            elif outcome == "pushed back" and ticket > self._cut_at:
                self._cut_at = self._tickets
                self.limit = max(1.0, self.limit / 2)
            if int(self.limit) != before:
                self.trace.append((round(time.monotonic() - self._started, 3), int(self.limit), outcome))
                del self.trace[:-TRACE_LENGTH]
            self._condition.notify_all()

    def settled(self, last: int = 10) -> float:
        """The mean of the last ``last`` limits traced: where the pacing settled."""
        limits = [limit for _, limit, _ in self.trace[-last:]]
        return sum(limits) / len(limits)
