"""Where a node's memory sits, sampled from inside it: RSS and glibc's own account of its heaps.

Put this directory on ``PYTHONPATH`` and name an output prefix in ``SWARMNODE_ALLOC_TRACE``;
every Python process started so (``benchmarks/first_round.py`` passes its environment to the
node) then samples, in a thread of its own, ``/proc/self/status`` every 10 ms and glibc's
``mallinfo2`` every 0.5 s, and writes ``PREFIX-PID.peak.json`` (the sample at the highest
VmRSS, with ``mallinfo2`` read at that moment) and ``PREFIX-PID.series.json`` (every 0.5 s, written every 10 s).
Fields in KiB: ``VmRSS``, ``RssAnon``, ``RssFile``; ``arena`` (heap bytes glibc holds),
``uordblks`` (heap in use), ``hblkhd`` (in use in blocks of their own mmap), ``fordblks``
(free heap, resident or not). ``RssAnon - uordblks - hblkhd`` is what the process holds
besides live malloc blocks: the interpreter's own arenas, libraries, stacks, and the free
heap still resident. glibc 2.33 or later (``mallinfo2``); elsewhere it samples nothing. Usage::

    PYTHONPATH=benchmarks/alloc_trace SWARMNODE_ALLOC_TRACE=/tmp/trace \\
        python benchmarks/first_round.py -- --priority normal --threads 2 --seed 0
"""

import os

if os.environ.get("SWARMNODE_ALLOC_TRACE"):
    import ctypes
    import json
    import re
    import threading
    import time

    class _MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in
                    ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")]

    _libc = ctypes.CDLL(None)
    if hasattr(_libc, "mallinfo2"):
        _libc.mallinfo2.restype = _MallInfo2
        _prefix = f"{os.environ['SWARMNODE_ALLOC_TRACE']}-{os.getpid()}"
        _t0 = time.monotonic()

        def _sample(with_heap: bool) -> dict:
            status = open("/proc/self/status").read()
            out = {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) for k in ("VmRSS", "RssAnon", "RssFile")}
            out["t"] = round(time.monotonic() - _t0, 2)
            if with_heap:
                info = _libc.mallinfo2()
                out.update({f: getattr(info, f) // 1024 for f in ("arena", "uordblks", "hblkhd", "fordblks")})
            return out

        def _trace() -> None:
            peak, series, next_series = 0, [], 0.0
            while True:
                now = _sample(False)
                if now["VmRSS"] > peak:
                    peak = now["VmRSS"]
                    with open(f"{_prefix}.peak.json", "w") as f:
                        json.dump(_sample(True), f)
                if now["t"] >= next_series:
                    series.append(_sample(True))
                    next_series = now["t"] + 0.5
                    if len(series) % 20 == 0:
                        with open(f"{_prefix}.series.json", "w") as f:
                            json.dump(series, f)
                time.sleep(0.01)

        threading.Thread(target=_trace, daemon=True, name="alloc-trace").start()
