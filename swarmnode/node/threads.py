"""How many intra-op threads torch gets: the cores other programs leave free, not the core count.

Torch's threads wait for each other at every operation. When another program holds a core,
the thread scheduled beside it runs late and the others spin waiting for it: on 2 cores with
one busy, 2 threads decoded at 0.4 tok/s where 1 thread decoded at 61 (docs/performance.md,
"Busy desktop"). So the node measures what other programs use and keeps only the threads
the machine can run.

What "other programs use" means here: the whole machine's busy CPU time minus the node's
own, over a window, in cores (:class:`CpuMeter`); the node's own is this process's and its
children's (hivemind's DHT process and its p2pd, busiest while the node joins). It needs no
idle moment to measure, since the node's own threads are subtracted; at background priority (see
``priority.py``) other programs get the CPU they ask for, so what they use is what they want.

The count follows that reading with hysteresis (a dead band between the two thresholds, and
waits), so noise does not make it flap:

- **shed fast**: the count drops as soon as a reading says other programs use more than
  ``SHED_ABOVE`` of the cores it would need (checked between rounds and at every phase
  boundary, since a round run with one thread too many is several times slower);
- **rise slowly, and verify**: it rises only after ``confirm`` readings in a row leave
  ``RISE_BELOW`` or less busy, and the round after a rise must decode at least
  ``1 - TOLERATED_LOSS`` as fast as the round before it; otherwise it goes back and waits
  before trying again, twice as long each time (up to ``MAX_HOLD`` rounds). A rise that a
  shed undoes within ``SHORT_LIVED`` rounds, or within the wait before it if that was longer,
  counts as failed too, so a load that keeps hovering around the thresholds makes changes
  ever rarer instead of a steady flip-flop.

``threads = N`` (``--threads N``) pins the count; nothing is measured then.

**Every thread that computes.** Torch's count is per OS thread: ``torch.set_num_threads``
sets OpenMP's count and MKL's thread-local count of the calling thread only, and a matrix
product that MKL runs in a thread that never set it uses every core, whatever
``torch.get_num_threads()`` says there (measured on 2 cores: a worker thread of a process
whose main thread had set 1 ran its products on 2 threads). asyncio's ``to_thread`` hands
work to whichever pool thread is free, so a node's model work runs in one thread of its own,
:class:`ModelThread`, which applies the count before each job. :func:`confine_library_threads`
covers the pools torch's count does not govern: the tokenizers library's Rust threads (every
core by default) and torch's inter-op pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

SHED_ABOVE = 0.35  # cores of other load that cost the node a thread
RISE_BELOW = 0.15  # cores of other load under which the node takes a thread back
TOLERATED_LOSS = 0.15  # decode tok/s a rise may lose before it is undone
FIRST_HOLD, MAX_HOLD = 2, 32  # rounds to wait before trying a rise again, doubling
SHORT_LIVED = 4  # a rise undone within this many rounds (or the last wait, if longer) failed
MIN_WINDOW_S = 0.5  # shorter readings are clock-tick noise; the start probe waits this long at least


@dataclass(frozen=True)
class CpuSample:
    wall: float
    busy: float  # the machine's busy CPU seconds (all cores)
    own: float  # the node's CPU seconds (this process's threads and its children)


def _machine_busy_s() -> float:
    import psutil

    t = psutil.cpu_times()
    return t.user + t.system + sum(getattr(t, f, 0.0) for f in ("nice", "irq", "softirq", "steal"))


def _own_cpu_s() -> float:
    """CPU seconds of this process and of its children, running or ended (the node's own work)."""
    import psutil

    t = os.times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in psutil.Process().children(recursive=True):
        try:
            c = child.cpu_times()
        except psutil.Error:  # ended since it was listed
            continue
        total += c.user + c.system + c.children_user + c.children_system
    return total


class CpuMeter:
    """Cores kept busy by other programs between two samples (the machine's busy time minus ours)."""

    def __init__(self, clock: Callable[[], float] | None = None, busy: Callable[[], float] | None = None,
                 own: Callable[[], float] | None = None):
        self._clock, self._busy, self._own = clock, busy, own

    def sample(self) -> CpuSample:
        return CpuSample((self._clock or time.monotonic)(), (self._busy or _machine_busy_s)(),
                         (self._own or _own_cpu_s)())

    @staticmethod
    def others(a: CpuSample, b: CpuSample) -> float | None:
        """Other programs' busy cores from ``a`` to ``b``; None when the window is too short to tell."""
        wall = b.wall - a.wall
        if wall < MIN_WINDOW_S:
            return None
        return max(0.0, ((b.busy - a.busy) - (b.own - a.own)) / wall)


def _cgroup_cores(path: Path = Path("/sys/fs/cgroup/cpu.max")) -> float | None:
    """The CPU quota of a Linux container (cgroup v2 ``cpu.max``) in cores; None when unlimited or unknown."""
    try:
        quota, period = path.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def usable_cores() -> int:
    """Cores this process may run on: its CPU affinity, capped by a container's CPU quota."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    quota = _cgroup_cores()
    return max(1, min(cores, math.floor(quota)) if quota else cores)


def physical_cores() -> int:
    """Torch's own default: one thread per physical core (hyperthread siblings share one core's units)."""
    import psutil

    return min(usable_cores(), psutil.cpu_count(logical=False) or usable_cores())


def wanted(current: int, others: float, cores: int, ceiling: int) -> int:
    """The count for a reading of ``others`` busy cores, with a dead band between shedding and rising."""
    free = cores - others
    shed = math.floor(free + SHED_ABOVE + 1e-9)
    rise = math.floor(free + RISE_BELOW + 1e-9)
    if shed < current:
        return max(1, shed)
    if rise > current:
        return min(ceiling, rise)
    return current


@dataclass(frozen=True)
class ThreadChoice:
    """The count in use and why (shown in the log, ``/v1/status``, the dashboard and ``doctor``)."""

    count: int
    reason: str
    pinned: bool = False
    others_busy: float | None = None  # cores other programs used in the last reading
    cores: int = 0

    def as_dict(self) -> dict:
        return {"count": self.count, "reason": self.reason, "pinned": self.pinned,
                "others_busy": None if self.others_busy is None else round(self.others_busy, 2),
                "cores": self.cores}


def _fmt(cores: float) -> str:
    return f"{cores:.2f}"


def _set_torch_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


class ThreadPolicy:
    """The node's thread count: measured at start, re-checked while it runs, applied per worker thread.

    Torch keeps the count per OS thread once that thread has run a parallel operation, so
    :meth:`apply` must run in the thread that does the model work, before each piece of it.
    ``on_change`` gets every new :class:`ThreadChoice` (the daemon logs it and puts it in the
    node's state). Not thread-safe: the node's worker calls it, one round at a time.
    """

    def __init__(self, pinned: int = 0, *, cores: int | None = None, ceiling: int | None = None,
                 meter: CpuMeter | None = None, confirm: int = 3,
                 on_change: Callable[[ThreadChoice], None] | None = None,
                 set_threads: Callable[[int], None] = _set_torch_threads,
                 get_threads: Callable[[], int] = _torch_threads):
        self.cores = cores or usable_cores()
        self.ceiling = ceiling or physical_cores()
        self.meter = meter or CpuMeter()
        self.confirm = confirm
        self.on_change = on_change
        self._set, self._get = set_threads, get_threads
        self._round_mark = self._phase_mark = self.meter.sample()
        self._votes = 0  # readings in a row that would allow a rise
        self._hold = 0  # rounds before a rise may be tried
        self._next_hold = FIRST_HOLD
        self._trial: tuple[int, float] | None = None  # (count before a rise, its decode tok/s)
        self._since_rise: int | None = None  # rounds since the last rise
        self._probation = SHORT_LIVED  # rounds the last rise must last to count as a success
        self._refused = False  # the platform refused a count: torch's own stands from then on
        if pinned:
            self.choice = ThreadChoice(pinned, f"pinned by threads = {pinned}", pinned=True, cores=self.cores)
        else:
            self.choice = ThreadChoice(self.ceiling, "auto: not measured yet", cores=self.cores)

    @property
    def count(self) -> int:
        return self.choice.count

    def _change(self, count: int, reason: str, others: float | None, first: bool = False) -> None:
        """Take a new count (or the ``first`` one, which the caller logs) and tell ``on_change``;
        the reading that led to it stays the stated reason until the next change."""
        before = self.choice.count
        self.choice = ThreadChoice(count, reason, self.choice.pinned, others, self.cores)
        if count != before and not first:
            log.info("threads: %d -> %d (%s)", before, count, reason)
        if self.on_change is not None:
            self.on_change(self.choice)

    def _back_off(self) -> None:
        self._hold, self._next_hold = self._next_hold, min(MAX_HOLD, 2 * self._next_hold)

    def _shed(self, target: int, others: float) -> None:
        if self._since_rise is not None and self._since_rise < self._probation:
            self._back_off()
        self._trial, self._votes, self._since_rise = None, 0, None
        self._change(target, f"auto: other programs use {_fmt(others)} of {self.cores} cores", others)

    def start(self, sleep: Callable[[float], None] = time.sleep) -> ThreadChoice:
        """The first count, from what other programs used since this policy was made (at least
        ``MIN_WINDOW_S``: the daemon makes it before loading the model, so the load is the probe)."""
        if self.choice.pinned:
            self._change(self.count, self.choice.reason, None, first=True)
            return self.choice
        waited = self.meter.sample().wall - self._round_mark.wall
        if waited < MIN_WINDOW_S:
            sleep(MIN_WINDOW_S - waited)
        now = self.meter.sample()
        others = CpuMeter.others(self._round_mark, now) or 0.0
        self._round_mark = self._phase_mark = now
        count = max(1, min(self.ceiling, math.floor(self.cores - others + SHED_ABOVE + 1e-9)))
        self._change(count, f"auto: other programs use {_fmt(others)} of {self.cores} cores", others, first=True)
        return self.choice

    def apply(self) -> int:
        """Set the count in the calling thread; a count the platform refuses falls back to torch's own."""
        if self._refused:
            return self.count
        try:
            self._set(self.count)
        except (RuntimeError, ValueError, OSError) as exc:
            self._refused = True
            kept = self._get()
            log.warning("threads: the platform refused %d threads (%s); using %d", self.count, exc, kept)
            self.choice = ThreadChoice(kept, f"refused {self.count} ({exc}); torch's {kept}",
                                       pinned=True, others_busy=self.choice.others_busy, cores=self.cores)
            if self.on_change is not None:
                self.on_change(self.choice)
        return self.count

    def check_phase(self) -> int:
        """At a phase boundary: shed threads at once if other programs took cores since the last
        check; never rise here (rises wait for a round's throughput). Applies and returns the count."""
        if not self.choice.pinned:
            now = self.meter.sample()
            others = CpuMeter.others(self._phase_mark, now)
            if others is not None:
                self._phase_mark = now
                target = wanted(self.count, others, self.cores, self.ceiling)
                if target < self.count:
                    self._shed(target, others)
        return self.apply()

    def end_round(self, tokens_per_second: float | None) -> ThreadChoice:
        """After a round: judge a rise on trial by its decode throughput, then re-read the load."""
        now = self.meter.sample()
        others = CpuMeter.others(self._round_mark, now)
        self._round_mark = self._phase_mark = now
        if self.choice.pinned or others is None:
            return self.choice
        self._hold = max(0, self._hold - 1)
        if self._since_rise is not None:
            self._since_rise += 1
            if self._since_rise >= self._probation:  # the rise held: the next one starts from a short hold
                self._since_rise, self._next_hold = None, max(FIRST_HOLD, self._next_hold // 2)
        if self._trial is not None:
            before, before_tps = self._trial
            self._trial = None
            if tokens_per_second is not None and tokens_per_second < (1 - TOLERATED_LOSS) * before_tps:
                self._back_off()
                self._since_rise = None
                self._change(before, f"auto: {self.count} threads decoded {tokens_per_second:.0f} tok/s against "
                                     f"{before_tps:.0f} with {before}; {before} for {self._hold} rounds", others)
                return self.choice
        target = wanted(self.count, others, self.cores, self.ceiling)
        if target < self.count:
            self._shed(target, others)
        elif target > self.count and self._hold == 0:
            self._votes += 1
            if self._votes >= self.confirm:
                self._votes, self._since_rise = 0, 0
                self._probation = max(SHORT_LIVED, self._next_hold // 2)
                if tokens_per_second is not None:
                    self._trial = (self.count, tokens_per_second)
                self._change(target, f"auto: other programs use {_fmt(others)} of {self.cores} cores; "
                                     "trying more threads", others)
        elif target <= self.count:
            self._votes = 0
        return self.choice


def confine_library_threads() -> None:
    """Keep the thread pools that torch's count does not govern to one thread; call before any model work.

    Tokenization is a few milliseconds a round, so the tokenizers library's Rust threads are
    switched off (which also spares the warning it prints when a process forks after using
    them). Torch's inter-op pool runs ``torch.jit.fork`` work, which a node does not use; its
    size can be set once, before the pool starts, and a later call is ignored.
    """
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    import torch

    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or the pool already runs
        pass


T = TypeVar("T")


class ModelThread:
    """The one OS thread that runs a node's model work, with the node's thread count set before each job.

    Jobs run one at a time in submission order. ``policy`` None leaves torch's count alone.
    """

    def __init__(self, policy: ThreadPolicy | None = None):
        self.policy = policy
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="swarmnode-model")

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        if self.policy is not None:
            self.policy.apply()
        return fn(*args)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the model thread, awaited from the event loop."""
        return await asyncio.get_running_loop().run_in_executor(self._executor, self._call, fn, args)

    def close(self) -> None:
        """Let the thread end once its current job (if any) returns."""
        self._executor.shutdown(wait=False)
