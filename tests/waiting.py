"""The tests' one way to wait for something: poll a condition until it holds, or fail saying what.

``wait_until`` for plain code, ``wait_until_async`` inside an event loop (its condition may be
a coroutine function, its ``sleep`` Textual's ``pilot.pause``). Both return the condition's
first true value, and fail with an AssertionError naming ``what`` after ``timeout`` seconds,
or at once when one of ``procs`` (the processes the wait depends on) has exited;
``context()`` adds to the message (a log's tail).
"""

from __future__ import annotations

import asyncio
import inspect
import subprocess
import time
from typing import Any, Awaitable, Callable, Iterable, Iterator


def _polls(timeout: float, what: str, procs: Iterable[subprocess.Popen], context: Callable[[], str]) -> Iterator[None]:
    deadline = time.monotonic() + timeout
    procs = list(procs)
    while True:
        yield
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(f"a process exited ({p.returncode}) while waiting for {what}\n{context()}")
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}\n{context()}")


def wait_until(condition: Callable[[], Any], timeout: float, what: str, *, interval: float = 0.1,
               procs: Iterable[subprocess.Popen] = (), context: Callable[[], str] = str) -> Any:
    for _ in _polls(timeout, what, procs, context):
        value = condition()
        if value:
            return value
        time.sleep(interval)


async def wait_until_async(condition: Callable[[], Any], timeout: float, what: str, *, interval: float = 0.05,
                           procs: Iterable[subprocess.Popen] = (), context: Callable[[], str] = str,
                           sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep) -> Any:
    for _ in _polls(timeout, what, procs, context):
        value = condition()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        await sleep(interval)
