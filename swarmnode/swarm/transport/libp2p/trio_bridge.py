"""A trio program in a thread of its own, driven from asyncio.

py-libp2p runs on trio, the node on asyncio. :class:`TrioThread` runs ``trio.run`` in its
own thread. The asyncio side reaches it with ``trio.from_thread``, always from a worker
thread, so the event loop never waits on trio; the trio side reaches
back with ``loop.call_soon_threadsafe``. :meth:`TrioThread.start` returns once the program
says it is ready, or raises its startup error; :meth:`TrioThread.stop` cancels everything
inside ``trio.run`` and joins the thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
from typing import Any, Awaitable, Callable

import trio

log = logging.getLogger("swarmnode.swarm.transport")


class TrioThread:
    """One ``trio.run`` in a daemon thread named ``name``; an error that ends it after it was
    ready is logged as ``what`` stopped."""

    def __init__(self, name: str, what: str):
        self.name = name
        self.what = what
        self._thread: threading.Thread | None = None
        self._ready: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._token: trio.lowlevel.TrioToken | None = None
        self._cancel: trio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None

    async def start(self, main: Callable[[], Awaitable[None]], timeout: float) -> None:
        """Run ``main()`` inside ``trio.run`` and wait until it calls :meth:`ready`. Raises what
        ``main`` raised before that, or ``asyncio.TimeoutError`` after ``timeout`` seconds
        (then call :meth:`stop`). Once stopped, it may be started again."""
        self._ready = concurrent.futures.Future()
        self._token = self._cancel = self._nursery = None
        self._thread = threading.Thread(target=self._run, args=(main,), name=self.name, daemon=True)
        self._thread.start()
        await asyncio.wait_for(asyncio.wrap_future(self._ready), timeout)

    def ready(self, nursery: trio.Nursery) -> None:
        """Called by ``main`` in the trio thread once it is up; :meth:`start_soon` runs tasks in ``nursery``."""
        self._nursery = nursery
        self._ready.set_result(None)

    def running(self) -> bool:
        """Whether the trio program got ready and runs still (False before :meth:`start`, after
        :meth:`stop`, and once it ended on an error)."""
        thread, ready = self._thread, self._ready
        return thread is not None and thread.is_alive() and ready.done() and ready.exception() is None

    def in_thread(self) -> bool:
        return threading.current_thread() is self._thread

    async def run(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """``await fn(*args)`` in the trio thread, from asyncio; raises what it raises."""
        return await _in_daemon_thread(trio.from_thread.run, fn, *args, trio_token=self._token)

    def start_soon(self, fn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``fn(*args)`` as a task of the ready nursery, from any thread (outside the trio
        thread this blocks until trio has scheduled it). RuntimeError before :meth:`ready`,
        trio.RunFinishedError once the program ended."""
        nursery = self._nursery
        if self._token is None or nursery is None:
            raise RuntimeError(f"{self.name} is not running")
        if self.in_thread():
            nursery.start_soon(fn, *args)
        else:
            trio.from_thread.run_sync(nursery.start_soon, fn, *args, trio_token=self._token)

    async def stop(self, timeout: float) -> bool:
        """Cancel everything in the trio thread and join it for at most ``timeout`` seconds;
        False if it is still alive then. Safe to call twice."""
        thread = self._thread
        if thread is None:
            return True
        if self._token is not None and self._cancel is not None:
            try:
                await asyncio.wait_for(_in_daemon_thread(trio.from_thread.run_sync, self._cancel.cancel,
                                                         trio_token=self._token), timeout)
            except (trio.RunFinishedError, asyncio.TimeoutError):  # ended already; stuck (the join says)
                pass
        await asyncio.to_thread(thread.join, timeout)
        self._thread = None
        return not thread.is_alive()

    def _run(self, main: Callable[[], Awaitable[None]]) -> None:
        try:
            trio.run(self._main, main)
        except BaseException as exc:  # surface startup errors to start(); later ones are logged
            if not self._ready.done():
                self._ready.set_exception(exc if isinstance(exc, Exception) else RuntimeError(repr(exc)))
            else:
                log.error("%s stopped: %s", self.what, exc)

    async def _main(self, main: Callable[[], Awaitable[None]]) -> None:
        # trio_typing's stale trio stubs (a libp2p dependency) take CancelScope's attributes for arguments
        with trio.CancelScope() as cancel:  # pyright: ignore[reportCallIssue]
            self._cancel = cancel
            self._token = trio.lowlevel.current_trio_token()
            await main()


async def _in_daemon_thread(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` in a daemon thread of its own; its result or exception, awaited.

    Not asyncio's default executor: a call into a trio program that never answers (a host
    that failed to stop) would hold an executor thread, which the interpreter joins at exit,
    and the node would never exit. A daemon thread is left behind instead."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()

    def settle(outcome: Callable[[], Any]) -> None:
        if not done.done():
            outcome()

    def call() -> None:
        try:
            outcome = functools.partial(done.set_result, fn(*args, **kwargs))
        except BaseException as exc:
            outcome = functools.partial(done.set_exception, exc)
        try:
            loop.call_soon_threadsafe(settle, outcome)
        except RuntimeError:  # the loop has closed: nobody waits for the answer any more
            pass

    threading.Thread(target=call, name=f"trio-call-{getattr(fn, '__name__', 'fn')}", daemon=True).start()
    return await done
