"""The experiment's outputs: the CSV tables, ``summary.md`` (the paper's cumulative reward per
config and model, its ratio to the same model's nodes in the baseline config with a 95 %
interval across seeds, the yardstick, and what each model's nodes trained on from peers) and
``rewards.png``."""

from __future__ import annotations

import json
import math
import resource
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path

from swarmnode.experiment.analysis import by_family, forgetting, spread
from swarmnode.experiment.settings import Settings
from swarmnode.experiment.tables import read_rows

# Two-sided 95 % Student t quantiles by degrees of freedom; past 30 the normal one is close enough.
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
        10: 2.228, 12: 2.179, 15: 2.131, 20: 2.086, 30: 2.042}


def peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


# ---- reports -----------------------------------------------------------------------------------
def _t95(df: int) -> float:
    best = [k for k in _T95 if k <= df]
    return _T95[max(best)] if df <= 30 else 1.96


def interval(values: Sequence[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95 % t interval (None for fewer than two values)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, None
    return mean, _t95(len(values) - 1) * statistics.stdev(values) / math.sqrt(len(values))


def _model(row: dict) -> str:
    return row.get("model") or ""  # rows written before the column existed: one model


def summarize(rows: list[dict], labels: Sequence[str]) -> dict:
    """Per config and model (``cells``, keyed ``(config, model)``): cumulative reward of that
    model's nodes per seed (over the rounds every config finished in that seed), its ratio to
    the same model's nodes in the baseline config with a 95 % interval across seeds, the
    final-window mean reward, the mean signal rate, the families above their start level at
    the last round (mean over nodes and seeds; None for rows from before it was recorded),
    own groups a round that were all right (None before it was recorded) and the seconds."""
    by = defaultdict(list)  # (config, model, seed) -> rows
    for row in rows:
        by[(row["config"], _model(row), int(row["seed"]))].append(row)
    seeds = sorted({int(r["seed"]) for r in rows})
    models = list(dict.fromkeys(_model(r) for r in rows))
    labels = [lb for lb in labels if any((lb, md, sd) in by for md in models for sd in seeds)]
    baseline = next((lb for lb in labels if lb.endswith("/0")), labels[0] if labels else None)
    rounds_by_seed = {}
    for sd in seeds:
        per_config = [len({int(r["round"]) for md in models for r in by[(lb, md, sd)]}) for lb in labels]
        rounds_by_seed[sd] = min(per_config) if per_config else 0
    out = {"baseline": baseline, "models": models, "rounds_by_seed": rounds_by_seed, "cells": {}}
    for lb in labels:
        for md in models:
            cum, final, secs, signal, up, solved = {}, [], 0.0, [], [], []
            for sd in seeds:
                n = rounds_by_seed[sd]
                use = [r for r in by[(lb, md, sd)] if int(r["round"]) < n]
                if not use:
                    continue
                cum[sd] = sum(float(r["reward_mean"]) for r in use)
                window = max(1, n // 10)
                final += [float(r["reward_mean"]) for r in use if int(r["round"]) >= n - window]
                secs += sum(float(r["seconds"]) for r in use)
                signal += [float(r["signal_rate"]) for r in use if r.get("signal_rate")]
                up += [int(r["levels_up"]) for r in use if int(r["round"]) == n - 1 and r.get("levels_up")]
                solved += [int(r["n_solved"]) for r in use if r.get("n_solved")]
            if cum:
                out["cells"][(lb, md)] = {
                    "cumulative": cum, "final_window": statistics.fmean(final) if final else None,
                    "signal_rate": statistics.fmean(signal) if signal else None,
                    "levels_up": statistics.fmean(up) if up else None,
                    "solved": statistics.fmean(solved) if solved else None, "seconds": secs}
    for (lb, md), c in out["cells"].items():
        base = out["cells"].get((baseline, md), {}).get("cumulative", {})
        c["ratios"] = {sd: c["cumulative"][sd] / base[sd] for sd in c["cumulative"] if base.get(sd)}
        c["ratio"] = interval(list(c["ratios"].values())) if c["ratios"] else None
        c["cumulative_mean"] = statistics.fmean(c["cumulative"].values())
    return out


def yardstick_round(rows: list[dict], rounds_by_seed: dict[int, int]) -> int | None:
    """The latest round after which every summarised seed has yardstick scores, within its
    summarised rounds (a run stopped between yardsticks is scored at the last one); None if none."""
    taken = defaultdict(set)
    for r in rows:
        if r["config"] != "base" and int(r["round"]) <= rounds_by_seed.get(int(r["seed"]), -1):
            taken[int(r["seed"])].add(int(r["round"]))
    common = set.intersection(*(taken[sd] for sd in rounds_by_seed)) if rounds_by_seed else set()
    return max(common, default=None)


def yardstick_by_seed(rows: list[dict], rounds_by_seed: dict[int, int]) -> dict[tuple, dict[int, float]]:
    """``(config, model)`` -> seed -> the mean over its nodes of their yardstick after
    :func:`yardstick_round` (empty before every seed has one)."""
    at = yardstick_round(rows, rounds_by_seed)
    cells = defaultdict(lambda: defaultdict(list))  # (config, model) -> seed -> scores
    for r in rows:
        if r["config"] != "base" and int(r["round"]) == at:
            cells[(r["config"], _model(r))][int(r["seed"])].append(float(r["score"]))
    return {key: {sd: statistics.fmean(v) for sd, v in sorted(by_seed.items())} for key, by_seed in cells.items()}


def summarize_yardstick(rows: list[dict], rounds_by_seed: dict[int, int]) -> dict:
    """``(config, model)`` -> mean and 95 % interval across seeds of :func:`yardstick_by_seed`,
    and ``("base", model)`` -> the untrained model's score."""
    out: dict = {("base", _model(r)): (float(r["score"]), None) for r in rows if r["config"] == "base"}
    for key, by_seed in yardstick_by_seed(rows, rounds_by_seed).items():
        out[key] = interval(list(by_seed.values()))
    return out


def per_seed_lines(summary: dict, by_seed: dict[tuple, dict[int, float]]) -> list[str]:
    """The summary's section of each config against the baseline seed by seed: cumulative
    reward ratios, yardsticks, and the yardstick's difference with its 95 % interval (paired
    by seed: the configs of a seed share questions and sampling seeds)."""
    baseline, body = summary["baseline"], []
    for (lb, md), c in summary["cells"].items():
        if lb == baseline or not c["ratios"]:
            continue
        own, base = by_seed.get((lb, md), {}), by_seed.get((baseline, md), {})
        diffs = [own[sd] - base[sd] for sd in own if sd in base]
        body.append(f"| {lb} | {md or '-'} | {_joined(c['ratios'].values(), 2)} | {_joined(own.values()) or 'n/a'} | "
                    f"{_joined(base.values()) or 'n/a'} | {per_seed_text(diffs) if diffs else 'n/a'} |")
    return _section(
        "Seed by seed", f"Each config against `{baseline}` in each seed, in the order of the seeds above; the "
        "yardstick's difference is taken per seed, then its mean and 95 % t interval across seeds.",
        ["config", "model", "cumulative reward vs baseline", "yardstick", "baseline's yardstick",
         "yardstick minus baseline's"], body) if body else []


def summarize_external(external: list[dict], rows: list[dict]) -> dict:
    """What each config's nodes of each model trained on from peers: ``(config, model)`` ->
    node-rounds, external groups a round, and per sender model: groups a round, their mean
    reward and share with a right answer, as the receiver scored them."""
    node_rounds = defaultdict(set)
    for r in rows:
        node_rounds[(r["config"], _model(r))].add((r["seed"], r["node"], r["round"]))
    by = defaultdict(lambda: defaultdict(list))  # (config, model) -> sender model -> rows
    for e in external:  # only rounds that ``rows`` has: a round cut short wrote some of its external rows
        key = (e["config"], e["model"])
        if (e["seed"], e["node"], e["round"]) in node_rounds[key]:
            by[key][e["sender_model"]].append(e)
    out = {}
    for key, senders in by.items():
        n = len(node_rounds[key]) or 1
        out[key] = {"node_rounds": n, "per_round": sum(len(v) for v in senders.values()) / n, "from": {
            md: {"per_round": len(v) / n, "reward": statistics.fmean(float(e["reward_mean"]) for e in v),
                 "with_right": statistics.fmean(int(e["right"]) > 0 for e in v),
                 "families": dict(sorted(Counter(e["family"] for e in v).items()))}
            for md, v in sorted(senders.items())}}
    return out


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _fmt_interval(value: tuple[float, float | None] | None, suffix: str = "", digits: int = 2) -> str:
    if value is None:
        return "n/a"
    mean, half = value
    return f"{mean:.{digits}f}{suffix}" + (f" ({mean - half:.{digits}f} to {mean + half:.{digits}f})"
                                          if half is not None else " (one seed: no interval)")


def per_seed_text(values: Sequence[float], digits: int = 3) -> str:
    """``values`` (one per seed) as the experiment scripts print them: the mean with its 95 %
    interval, then each seed's value."""
    return f"{_fmt_interval(interval(values), digits=digits)}, per seed {_joined(values, digits)}"


def _joined(values: Iterable[float], digits: int = 3) -> str:
    return " / ".join(f"{v:.{digits}f}" for v in values)


def _describe_nodes(s: Settings) -> str:
    cohorts = s.cohorts
    if len(cohorts) == 1:
        return f"{cohorts[0].count} nodes"
    return f"{s.node_count} nodes (" + ", ".join(f"{c.count} {c.label}" for c in cohorts) + ")"


def write_reports(out: Path, s: Settings) -> Path:
    rows = read_rows(out / "rounds.csv")
    labels = [a.label for a in s.arms]
    n = s.node
    summary = summarize(rows, labels)
    yardstick_rows = read_rows(out / "yardstick.csv")
    yardstick = summarize_yardstick(yardstick_rows, summary["rounds_by_seed"])
    yardstick_at = yardstick_round(yardstick_rows, summary["rounds_by_seed"])
    external = summarize_external(read_rows(out / "external.csv"), rows)
    runs = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()] \
        if (out / "runs.jsonl").exists() else []
    models = ", ".join(f"`{c.label}`" for c in s.cohorts)
    lines = [
        "# SAPO controlled experiment",
        "",
        f"{_describe_nodes(s)} per config, configs {s.configs}, {n.questions} questions x {n.completions} "
        f"completions a round, {n.max_new_tokens} new tokens, model{'s' if len(s.cohorts) > 1 else ''} {models}"
        f"{' (' + runs[-1]['model'] + ')' if runs and runs[-1].get('model') else ''}, "
        f"tasks `{n.tasks or 'packaged tasks.toml'}`{' (' + s.families + ')' if s.families else ''}, "
        f"learning rate {n.learning_rate}, adaptive difficulty {'on' if n.adaptive_difficulty else 'off'}, "
        f"profile `{s.profile}`.",
        "",
        "Rounds finished per seed (every config): " + ", ".join(
            f"seed {sd}: {n}" for sd, n in summary["rounds_by_seed"].items()) + ".",
        "",
        "Cumulative reward = sum over rounds and a model's nodes of a node's mean reward in the round (the "
        "paper's measure), averaged over seeds; the ratio is taken per seed against the same model's nodes in "
        f"the baseline `{summary['baseline']}`, with a 95 % t interval across seeds. Final window = mean reward "
        "over the last tenth of the rounds. Signal rate = share of a round's training groups with non-zero "
        "advantage, mean over rounds and nodes. All right = own groups a round whose every completion was right "
        "(no advantage for their maker). Levels up = task families above their start level after the last "
        "round, mean over nodes and seeds. Yardstick = the nodes' greedy score on the fixed held-out questions "
        f"after {'no round yet' if yardstick_at is None else f'round {yardstick_at}'} (the last every seed has; "
        "mean over nodes, then over seeds, 95 % interval across seeds). Seconds = the "
        "model's nodes' generation, scoring, sharing and training.",
        "",
        "| config | model | cumulative reward | vs baseline (95 % CI) | final-window mean reward | signal rate "
        "| all right | levels up | yardstick | seconds |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for (lb, md), c in summary["cells"].items():
        lines.append(f"| {lb} | {md or '-'} | {_fmt(c['cumulative_mean'], 2)} | {_fmt_interval(c['ratio'], 'x')} | "
                     f"{_fmt(c['final_window'])} | {_fmt(c['signal_rate'])} | {_fmt(c['solved'], 2)} | "
                     f"{_fmt(c['levels_up'], 2)} | {_fmt_interval(yardstick.get((lb, md)), digits=3)} | "
                     f"{c['seconds']:.0f} |")
    base_scores = [(md, v[0]) for (cfg, md), v in yardstick.items() if cfg == "base"]
    if base_scores:
        lines += ["", "Untrained yardstick: " + ", ".join(f"{md or '-'} {x:.3f}" for md, x in base_scores) + "."]
    lines += per_seed_lines(summary, yardstick_by_seed(yardstick_rows, summary["rounds_by_seed"]))
    if external:
        lines += ["", "## What the nodes trained on from peers", "",
                  "External groups a round (mean over node-rounds) by the sender's model, with their mean reward "
                  "and the share with at least one right completion, as the receiving node scored them.", "",
                  "| config | receiver | external groups a round | from | groups a round | mean reward "
                  "| with a right answer | families |", "|---|---|---|---|---|---|---|---|"]
        for (lb, md), e in sorted(external.items()):
            for sender, f in e["from"].items():
                fams = ", ".join(f"{k} {v}" for k, v in f["families"].items())
                lines.append(f"| {lb} | {md or '-'} | {e['per_round']:.2f} | {sender or '-'} | {f['per_round']:.2f} | "
                             f"{f['reward']:.3f} | {f['with_right']:.2f} | {fams} |")
    lines += why_lines(read_rows(out / "groups.csv"), read_rows(out / "external.csv"), rows, yardstick_rows)
    if runs:
        last = runs[-1]
        lines += ["", f"Last invocation: {last['rounds_run']} lockstep rounds in {last['wall_seconds']} s, "
                      f"{last['adapters']} adapters, each model loaded once, peak RSS {last['peak_rss_mb']} MB"
                  + (f", peak GPU memory {last['peak_gpu_mb']} MB" if "peak_gpu_mb" in last else "") + "."]
    path = out / "summary.md"
    path.write_text("\n".join(lines) + "\n")
    plot_rewards(rows, labels, out / "rewards.png")
    return path


def _section(title: str, intro: str, columns: Sequence[str], body: Sequence[str]) -> list[str]:
    """A summary section: its title, what it shows and a table (``body`` its rows)."""
    return ["", f"## {title}", "", *([intro, ""] if intro else []), "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns), *body]


def why_lines(groups: list[dict], external: list[dict], rows: list[dict], yardstick: list[dict]) -> list[str]:
    """The summary's sections from :mod:`.analysis` (none for tables that lack what they need)."""
    lines = []
    families = by_family(groups, external, rows)
    if families:
        lines += _section(
            "By family: own groups and peers'",
            "A node's own groups a round, the share with signal and with a right completion; peers' groups it drew "
            "a round and the share with a right one; the mean log-prob per token of the groups it trained on under "
            "its own policy before the update, own against peers'.",
            ["config", "model", "family", "own", "with signal", "right", "drawn", "drawn right", "log-prob own",
             "log-prob peers'"],
            [f"| {lb} | {md or '-'} | {fam} | {_fmt(c['own'], 2)} | {_fmt(c['signal'], 2)} | {_fmt(c['right'], 2)} "
             f"| {c['drawn']:.2f} | {_fmt(c['drawn_right'], 2)} | {_fmt(c['logp_own'], 2)} "
             f"| {_fmt(c['logp_peer'], 2)} |" for (lb, md), fams in families.items() for fam, c in fams.items()])
    spreads = spread(groups, external, rows)
    if spreads:
        lines += _section(
            "Right answers spreading",
            "Asks of a question after another node of the config answered it right in an earlier round, and the "
            "share of right completions in them: in all, after the asker trained on a peer's right group of it, and "
            "without that.",
            ["config", "model", "asks", "right", "asks taught", "right", "asks untaught", "right"],
            [f"| {lb} | {md or '-'} | {c['asks']} | {_fmt(c['right'])} | {c['taught']} | "
             f"{_fmt(c['right_taught'])} | {c['untaught']} | {_fmt(c['right_untaught'])} |"
             for (lb, md), c in spreads.items()])
    forgot = forgetting(yardstick)
    if forgot:
        lines += _section(
            "Yardstick by family: best and last", "",
            ["config", "model", "family", "best (after round)", "last (after round)"],
            [f"| {lb} | {md or '-'} | {fam} | {c['best']:.3f} ({c['best_round']}) | {c['last']:.3f} "
             f"({c['last_round']}) |" for (lb, md), fams in forgot.items() for fam, c in fams.items()])
    return lines


def plot_rewards(rows: list[dict], labels: Sequence[str], path: Path) -> None:
    """Mean reward per round (over nodes and seeds) per config and model, trailing moving
    average; one colour per config, one line style per model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    n_rounds = max((int(r["round"]) for r in rows), default=0) + 1
    window = max(1, n_rounds // 15)
    models = list(dict.fromkeys(_model(r) for r in rows))
    styles = ["-", "--", ":", "-."]
    for i, lb in enumerate(labels):
        for j, md in enumerate(models):
            per_round = defaultdict(list)
            for r in rows:
                if r["config"] == lb and _model(r) == md:
                    per_round[int(r["round"])].append(float(r["reward_mean"]))
            if not per_round:
                continue
            xs = sorted(per_round)
            ys = [statistics.fmean(per_round[x]) for x in xs]
            smooth = [statistics.fmean(ys[max(0, k - window + 1):k + 1]) for k in range(len(ys))]
            ax.plot(xs, smooth, color=f"C{i}", linestyle=styles[j % len(styles)],
                    label=lb if len(models) == 1 else f"{lb} {md}")
    ax.set_xlabel("round")
    ax.set_ylabel(f"mean reward (moving average of {window})")
    ax.set_title("SAPO controlled experiment: local / external groups per round")
    ax.grid(alpha=0.3)
    ax.legend(title="I / J" if len(models) == 1 else "I / J, model")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
