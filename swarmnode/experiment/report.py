"""The experiment's outputs: ``rounds.csv`` rows, ``summary.md`` (the paper's cumulative reward
per config, its ratio to the baseline with a 95 % interval across seeds) and ``rewards.png``."""

from __future__ import annotations

import csv
import json
import math
import resource
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Sequence

from swarmnode.experiment.settings import Settings

CSV_FIELDS = ["config", "seed", "node", "round", "reward_mean", "n_external", "seconds", "n_local",
              "n_dropped_zero_adv", "signal_rate", "loss", "bundles_rejected", "levels_up"]
# Two-sided 95 % Student t quantiles by degrees of freedom; past 30 the normal one is close enough.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


# ---- reports -----------------------------------------------------------------------------------
def _t95(df: int) -> float:
    best = [k for k in _T95 if k <= df]
    return _T95[max(best)] if df <= 30 else 1.96


def _interval(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95 % t interval (None for fewer than two values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, _t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def summarize(rows: list[dict], labels: Sequence[str]) -> dict:
    """Per config: cumulative reward per seed (over the rounds every config finished in that
    seed), its ratio to the baseline config, the final-window mean reward, the mean signal
    rate, the families above their start level at the last round (mean over nodes and seeds;
    None for rows from before it was recorded) and the seconds."""
    by = defaultdict(list)  # (config, seed) -> rows
    for row in rows:
        by[(row["config"], int(row["seed"]))].append(row)
    seeds = sorted({int(r["seed"]) for r in rows})
    labels = [lb for lb in labels if any((lb, sd) in by for sd in seeds)]
    baseline = next((lb for lb in labels if lb.endswith("/0")), labels[0] if labels else None)
    rounds_by_seed = {}
    for sd in seeds:
        per_config = [len({int(r["round"]) for r in by[(lb, sd)]}) for lb in labels]
        rounds_by_seed[sd] = min(per_config) if per_config else 0
    out = {"baseline": baseline, "rounds_by_seed": rounds_by_seed, "configs": {}}
    for lb in labels:
        cum, final, secs, signal, up = {}, [], 0.0, [], []
        for sd in seeds:
            n = rounds_by_seed[sd]
            use = [r for r in by[(lb, sd)] if int(r["round"]) < n]
            if not use:
                continue
            cum[sd] = sum(float(r["reward_mean"]) for r in use)
            window = max(1, n // 10)
            final += [float(r["reward_mean"]) for r in use if int(r["round"]) >= n - window]
            secs += sum(float(r["seconds"]) for r in use)
            signal += [float(r["signal_rate"]) for r in use if r.get("signal_rate")]
            up += [int(r["levels_up"]) for r in use if int(r["round"]) == n - 1 and r.get("levels_up")]
        out["configs"][lb] = {"cumulative": cum, "final_window": statistics.fmean(final) if final else None,
                              "signal_rate": statistics.fmean(signal) if signal else None,
                              "levels_up": statistics.fmean(up) if up else None, "seconds": secs}
    base = out["configs"].get(baseline, {}).get("cumulative", {})
    for lb, c in out["configs"].items():
        ratios = [c["cumulative"][sd] / base[sd] for sd in c["cumulative"] if base.get(sd)]
        c["ratio"] = _interval(ratios) if ratios else None
        c["cumulative_mean"] = statistics.fmean(c["cumulative"].values()) if c["cumulative"] else None
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def write_reports(out: Path, s: Settings) -> Path:
    rows = read_rows(out / "rounds.csv")
    labels = [a.label for a in s.arms]
    n = s.node
    summary = summarize(rows, labels)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()] \
        if (out / "runs.jsonl").exists() else []
    lines = [
        "# SAPO controlled experiment",
        "",
        f"{s.nodes} nodes, configs {s.configs}, {n.questions} questions x {n.completions} completions a round, "
        f"{n.max_new_tokens} new tokens, model `{runs[-1]['model'] if runs and runs[-1].get('model') else n.model}`, "
        f"tasks `{n.tasks or 'packaged tasks.toml'}`{' (' + s.families + ')' if s.families else ''}, "
        f"learning rate {n.learning_rate}, profile `{s.profile}`.",
        "",
        "Rounds finished per seed (every config): " + ", ".join(
            f"seed {sd}: {n}" for sd, n in summary["rounds_by_seed"].items()) + ".",
        "",
        "Cumulative reward = sum over rounds and nodes of a node's mean reward in the round (the paper's "
        "measure), averaged over seeds; the ratio is taken per seed against the baseline "
        f"`{summary['baseline']}`, with a 95 % t interval across seeds. Final window = mean reward over the "
        "last tenth of the rounds. Signal rate = share of a round's training groups with non-zero advantage, "
        "mean over rounds and nodes. Levels up = task families above their start level after the last round, "
        "mean over nodes and seeds (a node that learns climbs, and its rewards come back down into the band). "
        "Seconds = the config's generation, scoring, sharing and training.",
        "",
        "| config | cumulative reward | vs baseline (95 % CI) | final-window mean reward | signal rate | levels up "
        "| seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for lb, c in summary["configs"].items():
        ratio = "n/a"
        if c["ratio"] is not None:
            mean, half = c["ratio"]
            ratio = f"{mean:.2f}x" + (f" ({mean - half:.2f} to {mean + half:.2f})" if half is not None
                                      else " (one seed: no interval)")
        lines.append(f"| {lb} | {_fmt(c['cumulative_mean'], 2)} | {ratio} | {_fmt(c['final_window'])} | "
                     f"{_fmt(c['signal_rate'])} | {_fmt(c['levels_up'], 2)} | {c['seconds']:.0f} |")
    if runs:
        last = runs[-1]
        lines += ["", f"Last invocation: {last['rounds_run']} lockstep rounds in {last['wall_seconds']} s, "
                      f"{last['adapters']} adapters on one base model, peak RSS {last['peak_rss_mb']} MB"
                  + (f", peak GPU memory {last['peak_gpu_mb']} MB" if "peak_gpu_mb" in last else "") + "."]
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    plot_rewards(rows, labels, out / "rewards.png")
    return path


def plot_rewards(rows: list[dict], labels: Sequence[str], path: Path) -> None:
    """Mean reward per round (over nodes and seeds) per config, trailing moving average."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    n_rounds = max((int(r["round"]) for r in rows), default=0) + 1
    window = max(1, n_rounds // 15)
    for lb in labels:
        per_round = defaultdict(list)
        for r in rows:
            if r["config"] == lb:
                per_round[int(r["round"])].append(float(r["reward_mean"]))
        if not per_round:
            continue
        xs = sorted(per_round)
        ys = [statistics.fmean(per_round[x]) for x in xs]
        smooth = [statistics.fmean(ys[max(0, i - window + 1):i + 1]) for i in range(len(ys))]
        ax.plot(xs, smooth, label=lb)
    ax.set_xlabel("round")
    ax.set_ylabel(f"mean reward (moving average of {window})")
    ax.set_title("SAPO controlled experiment: local / external groups per round")
    ax.grid(alpha=0.3)
    ax.legend(title="I / J")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
