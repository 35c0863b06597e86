"""Each phase's peak RSS inside a node: the highest VmRSS between two of its log records.

Put this directory on ``PYTHONPATH`` (or copy this file to the root of a tree that
``benchmarks/first_round.py --tree`` runs) and name an output prefix in ``PHASE_TRACE``: every
Python process started so reads ``/proc/self/statm`` every 10 ms in a thread of its own and
appends to ``PREFIX-PID.jsonl``, at each log record of a ``swarmnode`` logger (DEBUG included,
so the node's ``phase ...`` records too), one line for the stretch that record closes:
``t`` (seconds from start to the stretch's start), ``label`` (the record that opened it),
``peak_kb`` and ``end_kb``. Lines are written as they come, so a node stopped by a signal
keeps its stretches so far. Usage::

    cp benchmarks/phase_trace/sitecustomize.py /tmp/tree/
    PHASE_TRACE=/tmp/phases python benchmarks/first_round.py --tree /tmp/tree -- --seed 0
"""

import os

if os.environ.get("PHASE_TRACE"):
    import json
    import logging
    import threading
    import time

    _page_kb = os.sysconf("SC_PAGE_SIZE") // 1024
    _statm = open("/proc/self/statm")
    _out = open(f"{os.environ['PHASE_TRACE']}-{os.getpid()}.jsonl", "a", buffering=1)
    _t0 = time.monotonic()
    _lock = threading.Lock()
    _stretch = {"label": "start", "t": _t0, "peak": 0}

    def _rss_kb() -> int:
        _statm.seek(0)
        return int(_statm.read().split()[1]) * _page_kb

    def _close(label: str) -> None:
        with _lock:
            now = _rss_kb()
            peak = max(_stretch["peak"], now)
            _out.write(json.dumps({"t": round(_stretch["t"] - _t0, 2), "label": _stretch["label"],
                                   "peak_kb": peak, "end_kb": now}) + "\n")
            _stretch.update(label=label, t=time.monotonic(), peak=now)

    def _sample() -> None:
        while True:
            time.sleep(0.01)
            with _lock:
                _stretch["peak"] = max(_stretch["peak"], _rss_kb())

    class _Closer(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            _close(f"{record.name}: {record.getMessage()[:90]}")

    threading.Thread(target=_sample, daemon=True).start()
    _logger = logging.getLogger("swarmnode")
    _logger.addHandler(_Closer(logging.DEBUG))
    _logger.setLevel(logging.DEBUG)
