"""The thread-count policy, fed fake CPU readings: it sheds threads when a core is busy, takes
them back when it frees, does not flap under noise, undoes a rise that decodes slower, and
leaves a pinned count alone. And the count it gives holds in the thread that does the model work."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys

import pytest

from programs import argv
from swarmnode.node import threads as threads_mod
from swarmnode.node.threads import MAX_HOLD, CpuMeter, ThreadPolicy, wanted


class FakeMachine:
    """A clock and CPU counters that advance as the test says: ``run(seconds, others, own)``."""

    def __init__(self) -> None:
        self.t = self.busy = self.own = 0.0

    def run(self, seconds: float, others: float, own: float = 1.0) -> None:
        self.t += seconds
        self.busy += seconds * (others + own)
        self.own += seconds * own

    def meter(self) -> CpuMeter:
        return CpuMeter(clock=lambda: self.t, busy=lambda: self.busy, own=lambda: self.own)


class Recorder:
    def __init__(self) -> None:
        self.set_calls: list[int] = []
        self.changes = []


def make_policy(machine: FakeMachine, pinned: int = 0, cores: int = 2, **kw) -> tuple[ThreadPolicy, Recorder]:
    rec = Recorder()
    policy = ThreadPolicy(pinned, cores=cores, ceiling=cores, meter=machine.meter(), on_change=rec.changes.append,
                          set_threads=rec.set_calls.append, get_threads=lambda: cores, **kw)
    return policy, rec


def started(machine: FakeMachine, others: float, **kw) -> tuple[ThreadPolicy, Recorder]:
    policy, rec = make_policy(machine, **kw)
    machine.run(2.0, others)
    policy.start(sleep=lambda s: pytest.fail("the load was the probe: no sleep needed"))
    return policy, rec


def round_at(policy: ThreadPolicy, machine: FakeMachine, others: float, tps: float | None = 100.0) -> int:
    """One round of 10 s beside ``others`` busy cores; returns the count it decoded with."""
    n = policy.check_phase()
    machine.run(10.0, others, own=n)
    policy.end_round(tps)
    return n


def test_wanted_has_a_dead_band():
    assert wanted(2, 0.30, 2, 2) == 2 and wanted(2, 0.40, 2, 2) == 1  # shed above 0.35
    assert wanted(1, 0.20, 2, 2) == 1 and wanted(1, 0.10, 2, 2) == 2  # rise below 0.15
    assert wanted(8, 3.0, 16, 8) == 8  # the ceiling (physical cores) caps it
    assert wanted(2, 5.0, 2, 2) == 1  # never below one


def test_meter_subtracts_this_process():
    m = FakeMachine()
    meter = m.meter()
    a = meter.sample()
    m.run(4.0, others=0.5, own=1.5)
    assert CpuMeter.others(a, meter.sample()) == pytest.approx(0.5)
    assert CpuMeter.others(a, a) is None  # too short a window to tell


def test_starts_with_every_core_when_idle_and_fewer_beside_a_busy_core():
    idle, rec = started(FakeMachine(), others=0.02)
    assert idle.count == 2 and rec.changes[-1].others_busy == pytest.approx(0.02)
    busy, rec = started(FakeMachine(), others=1.0)
    assert busy.count == 1 and "1.00 of 2 cores" in rec.changes[-1].reason


def test_start_waits_for_a_reading_when_the_window_is_short():
    m = FakeMachine()
    policy, _ = make_policy(m)
    slept = []

    def sleep(s: float) -> None:
        slept.append(s)
        m.run(s, others=1.0)

    policy.start(sleep=sleep)
    assert slept == [pytest.approx(threads_mod.MIN_WINDOW_S)] and policy.count == 1


def test_sheds_at_the_next_phase_when_a_core_gets_busy_and_rises_only_after_confirmation():
    m = FakeMachine()
    policy, rec = started(m, others=0.0)
    assert round_at(policy, m, 0.0) == 2
    # another program takes a core in the middle of a round: the next phase already runs with 1
    policy.check_phase()
    m.run(5.0, others=1.0, own=2)
    assert policy.check_phase() == 1 and rec.set_calls[-1] == 1
    policy.end_round(40.0)
    assert round_at(policy, m, 1.0) == 1
    # it leaves: the count rises after `confirm` free readings in a row, not before
    for _ in range(policy.confirm - 1):
        assert round_at(policy, m, 0.02) == 1
        assert policy.count == 1
    assert round_at(policy, m, 0.02) == 1
    assert policy.count == 2 and "trying more threads" in policy.choice.reason
    assert round_at(policy, m, 0.02, tps=130.0) == 2
    assert policy.count == 2


def test_a_rise_that_decodes_slower_is_undone_and_retried_ever_later():
    m = FakeMachine()
    policy, rec = started(m, others=1.0)
    gaps, last_rise = [], None
    for r in range(120):
        n = round_at(policy, m, 0.0, tps=40.0 if policy.count == 2 else 130.0)  # CPU looks free, 2 is slow
        if n == 2:
            gaps.append(r - last_rise if last_rise is not None else r)
            last_rise = r
    assert policy.count == 1 and "decoded 40 tok/s against 130" in rec.changes[-1].reason
    # each failed rise doubles the wait before the next one, up to MAX_HOLD rounds
    assert len(gaps) <= 8 and gaps == sorted(gaps) and gaps[-1] >= MAX_HOLD


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("low, high, most_changes", [(0.18, 0.32, 0), (0.0, 0.5, 12)])
def test_noise_does_not_flap(seed, low, high, most_changes):
    """Inside the dead band nothing changes; noise straddling both thresholds changes the count
    a few times in 200 rounds (a naive threshold would change it every few rounds)."""
    rng = random.Random(seed)
    m = FakeMachine()
    policy, _ = started(m, others=0.25)
    counts = [round_at(policy, m, rng.uniform(low, high)) for _ in range(200)]
    changes = sum(a != b for a, b in zip(counts, counts[1:]))
    assert changes <= most_changes


def test_pinned_count_is_kept_whatever_the_load(caplog):
    m = FakeMachine()
    policy, rec = make_policy(m, pinned=3)
    policy.start()
    for others in (0.0, 1.5, 2.0, 0.0, 0.0, 0.0):
        assert round_at(policy, m, others) == 3
    assert rec.changes[0].pinned and "pinned by threads = 3" in rec.changes[0].reason
    assert len(rec.changes) == 1


def test_a_refused_count_falls_back_with_one_line(caplog):
    m = FakeMachine()
    rec = Recorder()

    def refuse(n: int) -> None:
        raise RuntimeError("Expected positive number of threads")

    policy = ThreadPolicy(0, cores=2, ceiling=2, meter=m.meter(), on_change=rec.changes.append,
                          set_threads=refuse, get_threads=lambda: 2)
    m.run(1.0, others=1.0)
    policy.start()
    with caplog.at_level(logging.WARNING, logger="swarmnode.node.threads"):
        assert policy.apply() == 2
        assert policy.apply() == 2
    assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 1
    assert "refused 1" in rec.changes[-1].reason


@pytest.mark.slow
def test_real_meter_sees_a_spinning_process():
    """The real counters: another program spinning on one core shows up as about one busy core.
    The spinner is started by a launcher that exits at once, so it is no descendant of this
    process (a child's CPU is the node's own)."""
    import signal
    import time

    launch = ("import subprocess; print(subprocess.Popen("  # -3: DEVNULL, so the spinner holds no pipe of ours
              f"{argv('spinner')!r}, start_new_session=True, stdout=-3, stderr=-3).pid)")
    pid = int(subprocess.run([sys.executable, "-c", launch], capture_output=True, text=True, check=True).stdout)
    try:
        time.sleep(0.3)
        meter = CpuMeter()
        a = meter.sample()
        time.sleep(1.5)
        others = CpuMeter.others(a, meter.sample())
    finally:
        os.kill(pid, signal.SIGKILL)
    assert others is not None and others >= 0.5


_PER_THREAD_PROBE = r"""
import asyncio, json, os, sys, time
import torch
from swarmnode.node.threads import ModelThread, ThreadPolicy

def thread_cpu():
    out = {}
    for tid in os.listdir("/proc/self/task"):
        fields = open(f"/proc/self/task/{tid}/stat").read().rsplit(")", 1)[1].split()
        out[tid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out

def work():
    # the shapes of the embedded model's MLP projections, decoding 64 rows
    weight, rows = torch.randn(1536, 576), torch.randn(64, 576)
    for _ in range(50):
        torch.nn.functional.linear(rows, weight)
    before, t0 = thread_cpu(), time.perf_counter()
    while time.perf_counter() - t0 < 2.0:
        torch.nn.functional.linear(rows, weight)
    after = thread_cpu()
    return sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)

async def main():
    model = ModelThread(ThreadPolicy(1))
    try:
        return await model.run(work)
    finally:
        model.close()

print(json.dumps(asyncio.run(main())))
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task") or threads_mod.usable_cores() < 2,
                    reason="needs Linux's per-thread CPU counters and two cores to spread over")
@pytest.mark.slow
def test_model_work_in_the_model_thread_runs_on_the_count_it_was_given():
    """Model work in a worker thread with 1 thread asked for computes on one thread, though the
    process's main thread never set a count: torch's count is per thread, and a matrix product
    in a thread that never set it spreads over every core (the busiest thread then does about
    half the work)."""
    proc = subprocess.run([sys.executable, "-c", _PER_THREAD_PROBE], capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")})
    assert proc.returncode == 0, proc.stderr[-2000:]
    per_thread = json.loads(proc.stdout.strip().splitlines()[-1])
    assert sum(per_thread) > 0.5  # enough CPU time to tell
    assert per_thread[0] >= 0.9 * sum(per_thread), per_thread


@pytest.mark.slow
def test_a_childs_cpu_time_counts_as_the_nodes_own():
    """hivemind's DHT process and p2pd are the node's children: their work while the node joins
    must not read as other programs' load and cost the first round its threads."""
    from swarmnode.node.threads import _own_cpu_s

    burn = ("import sys, time\n"
            "while time.process_time() < 0.6: pass\n"
            "print('burnt', flush=True)\n"
            "sys.stdin.read()\n")
    before = _own_cpu_s()
    child = subprocess.Popen([sys.executable, "-c", burn], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "burnt"
        assert _own_cpu_s() - before >= 0.5  # the running child's 0.6 CPU-s (read in clock ticks)
    finally:
        child.communicate("")
    assert _own_cpu_s() - before >= 0.5  # ended and reaped: still counted


def test_the_policy_follows_the_rounds_events_as_the_round_called_it():
    """At each of the round's phases a shed comes at once; after a round it is judged on the
    round's decode throughput (a rise that decoded slower is undone)."""
    from apifakes import finished_row
    from swarmnode.events import PhaseChanged, RoundFinished
    from swarmnode.node.round import ROUND_PHASES
    from swarmnode.node.roundthreads import RoundThreads
    from swarmnode.node.state import NodeState

    m = FakeMachine()
    policy, rec = started(m, others=0.0)
    state = NodeState()
    state.listen(RoundThreads(policy))
    m.run(5.0, others=1.0, own=2)  # another program takes a core mid-round
    state.emit(PhaseChanged("idle"))  # the daemon's, between rounds: no reading taken
    assert policy.count == 2 and rec.set_calls == []
    state.emit(PhaseChanged(ROUND_PHASES[1]))
    assert policy.count == 1 and rec.set_calls == [1]
    # the core is free again: the round whose window held the load, then rounds confirming it; a rise is tried
    for _ in range(1 + policy.confirm):
        m.run(10.0, others=0.0)
        state.emit(RoundFinished(finished_row(0, 0.5, tokens_generated=1000, seconds_generate=10.0)))
    assert policy.count == 2
    m.run(10.0, others=0.0, own=2)
    state.emit(RoundFinished(finished_row(0, 0.5, tokens_generated=500, seconds_generate=10.0)))  # half: undone
    assert policy.count == 1 and "decoded 50 tok/s against 100" in policy.choice.reason
