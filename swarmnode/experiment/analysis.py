"""Why sharing helped or not, from a run's group tables (``groups.csv``, ``external.csv``).

Three measures, each per config and model (the baseline config, which shares nothing, is the
control of the first two):

* :func:`by_family`: per task family, a node's own groups a round, the share with signal and
  with a right answer, and the peers' groups it drew, with theirs; with the mean log-prob per
  token of the groups it trained on under its own policy, own against peers' (a peer's
  completions far below its own are off-policy for it, and the update takes them as its own
  samples, with no importance weight);
* :func:`spread`: questions asked again (of a node) after another node of the config answered
  them right in an earlier round, and how often the asker is right then: with a peer's right
  group of that question in its own updates before, and without;
* :func:`forgetting`: per family, the best yardstick a config's nodes reached and where they
  ended (mean over nodes and seeds at each yardstick round).

Rows of rounds a run did not finish (``rows``, the round table, says which) are left out.
Tables written before a column existed give ``None`` where it is needed.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from collections.abc import Iterable

Key = tuple[str, str]  # (config, model)


def _finished(rows: list[dict]) -> set[tuple[str, str, str, str]]:
    return {(r["config"], r["seed"], r["node"], r["round"]) for r in rows}


def _mean(values: Iterable[float]) -> float | None:
    values = list(values)
    return statistics.fmean(values) if values else None


def by_family(groups: list[dict], external: list[dict], rows: list[dict]) -> dict[Key, dict[str, dict]]:
    """``(config, model)`` -> family -> own groups a node-round (``own``), their share with signal
    (``signal``) and with at least one right completion (``right``), peers' groups drawn a
    node-round (``drawn``) and their share with a right one (``drawn_right``), and the mean
    log-prob per token of the groups trained on, own (``logp_own``) and peers' (``logp_peer``).
    Without a groups table (a run's joined with one written before it existed) ``own`` is None."""
    done = _finished(rows)
    node_rounds: dict[Key, int] = defaultdict(int)
    for r in rows:
        node_rounds[(r["config"], r.get("model") or "")] += 1
    own: dict[Key, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    peer: dict[Key, dict[str, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for table, into in ((groups, own), (external, peer)):
        for g in table:
            if (g["config"], g["seed"], g["node"], g["round"]) in done:
                into[(g["config"], g.get("model") or "")][g["family"]].append(g)
    out: dict[Key, dict[str, dict]] = {}
    for key in sorted(set(own) | set(peer)):
        n = node_rounds[key] or 1
        out[key] = {}
        for family in sorted(set(own[key]) | set(peer[key])):
            mine, theirs = own[key][family], peer[key][family]
            out[key][family] = {
                "own": len(mine) / n if groups else None, "signal": _mean(g["signal"] == "1" for g in mine),
                "right": _mean(int(g["right"]) > 0 for g in mine),
                "drawn": len(theirs) / n, "drawn_right": _mean(int(g["right"]) > 0 for g in theirs),
                "logp_own": _mean(float(g["logp"]) for g in mine if g.get("logp")),
                "logp_peer": _mean(float(g["logp"]) for g in theirs if g.get("logp")),
            }
    return out


def spread(groups: list[dict], external: list[dict], rows: list[dict]) -> dict[Key, dict]:
    """``(config, model)`` -> the asks of a question after another node of the same config and
    seed had answered it right in an earlier round (``asks``), the share of right completions
    in them (``right``), and the same split by whether the asker had trained on a peer's group
    of that question with a right answer before (``taught``, ``right_taught``) or not
    (``untaught``, ``right_untaught``). Empty for tables without the ``question`` column."""
    done = _finished(rows)
    mine = [g for g in groups if (g["config"], g["seed"], g["node"], g["round"]) in done]
    if not mine or "question" not in mine[0]:
        return {}
    first_right: dict[tuple[str, str, str], dict[str, int]] = defaultdict(dict)  # (config, seed, q) -> node -> round
    for g in mine:
        if int(g["right"]) > 0:
            best = first_right[(g["config"], g["seed"], g["question"])]
            best[g["node"]] = min(best.get(g["node"], int(g["round"])), int(g["round"]))
    taught: dict[tuple[str, str, str, str], int] = {}  # (config, seed, node, q) -> first round trained on it
    for e in external:
        if int(e["right"]) > 0 and e.get("question") and (e["config"], e["seed"], e["node"], e["round"]) in done:
            k = (e["config"], e["seed"], e["node"], e["question"])
            taught[k] = min(taught.get(k, int(e["round"])), int(e["round"]))
    cells: dict[Key, dict[str, list[float]]] = defaultdict(lambda: {"all": [], "taught": [], "untaught": []})
    for g in mine:
        r, solvers = int(g["round"]), first_right.get((g["config"], g["seed"], g["question"]), {})
        if not any(node != g["node"] and rd < r for node, rd in solvers.items()):
            continue
        share = int(g["right"]) / int(g["responses"])
        was_taught = taught.get((g["config"], g["seed"], g["node"], g["question"]), r) < r
        cell = cells[(g["config"], g.get("model") or "")]
        cell["all"].append(share)
        cell["taught" if was_taught else "untaught"].append(share)
    return {key: {"asks": len(c["all"]), "right": _mean(c["all"]), "taught": len(c["taught"]),
                  "right_taught": _mean(c["taught"]), "untaught": len(c["untaught"]),
                  "right_untaught": _mean(c["untaught"])} for key, c in sorted(cells.items())}


def forgetting(yardstick: list[dict]) -> dict[Key, dict[str, dict]]:
    """``(config, model)`` -> family -> the best yardstick score the config's nodes reached
    (mean over nodes and seeds at a yardstick round; ``best`` after ``best_round`` rounds) and
    the score at the last round every seed has (``last``, ``last_round``)."""
    at: dict[Key, dict[str, dict[int, list[float]]]] = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    seeds_at: dict[Key, dict[int, set[str]]] = defaultdict(lambda: defaultdict(set))
    all_seeds: dict[Key, set[str]] = defaultdict(set)
    for r in yardstick:
        if r["config"] == "base":
            continue
        key, rd = (r["config"], r.get("model") or ""), int(r["round"])
        seeds_at[key][rd].add(r["seed"])
        all_seeds[key].add(r["seed"])
        for family, score in json.loads(r["by_family"]).items():
            at[key][family][rd].append(float(score))
    out: dict[Key, dict[str, dict]] = {}
    for key, families in sorted(at.items()):
        complete = [rd for rd, seeds in seeds_at[key].items() if seeds == all_seeds[key]]
        if not complete:
            continue
        last = max(complete)
        out[key] = {}
        for family, by_round in sorted(families.items()):
            means = {rd: statistics.fmean(v) for rd, v in by_round.items() if rd in complete}
            best_round = max(means, key=lambda rd: (means[rd], -rd))
            out[key][family] = {"best": means[best_round], "best_round": best_round, "last": means[last],
                                "last_round": last}
    return out
