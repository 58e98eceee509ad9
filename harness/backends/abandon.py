"""Waiting on a server without being held by it: calls on daemon threads that a stopped run, or a deadline,
abandons (a ThreadPoolExecutor's workers would hold the process's exit until their timeouts)."""

from __future__ import annotations

import threading
import time

from harness.core.errors import UserError


class DeadlineExceeded(Exception):
    """A request that did not end (connect to last byte) within --api-timeout."""


def within_deadline(call, seconds: float, stop: threading.Event):
    """``call()``'s result, where it ends within ``seconds`` from now: the client's timeout is per read, so a server
    that sends a byte now and then would hold a request for ever. The call runs on a daemon thread; past the deadline
    (or when the run stops) it is abandoned, and DeadlineExceeded (or the stop) is raised."""
    outcome: list = []
    done = threading.Event()

    def work() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as err:  # handed to the caller
            outcome.append((False, err))
        done.set()

    threading.Thread(target=work, daemon=True).start()
    deadline = time.monotonic() + seconds
    while not done.wait(min(0.1, max(0.0, deadline - time.monotonic()))):
        if stop.is_set():
            raise UserError("abandoned: the run stopped")
        if time.monotonic() >= deadline:
            raise DeadlineExceeded
    ok, value = outcome[0]
    if ok:
        return value
    raise value


def run_abandoning(calls: list, workers: int, stop: threading.Event) -> None:
    """Run ``calls`` on ``workers`` daemon threads and return when all are done. The first that fails, or a Ctrl-C,
    ends the wait at once: no further call starts, and those still waiting on a server are abandoned (a daemon thread
    does not hold up the process's exit, as a ThreadPoolExecutor's workers would until their timeouts); what they
    finished is journaled, what they did not is asked again on resume."""
    pending = list(reversed(calls))
    lock, done = threading.Lock(), threading.Event()
    failures: list[BaseException] = []
    left = [len(calls)]

    def work() -> None:
        while not stop.is_set():
            with lock:
                if not pending:
                    return
                call = pending.pop()
            try:
                call()
            except BaseException as err:  # said by the waiting thread
                failures.append(err)
                stop.set()
                done.set()
                return
            with lock:
                left[0] -= 1
                if left[0] == 0:
                    done.set()

    for _ in range(workers):
        threading.Thread(target=work, daemon=True).start()
    try:
        while not done.wait(0.1):  # a short wait: Ctrl-C is taken between waits
            pass
    finally:
        stop.set()
    if failures:
        raise failures[0]
