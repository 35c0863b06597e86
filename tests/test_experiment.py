"""The experiment harness on a tiny random model: outputs, sharing only where J > 0, resume."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from swarmnode.config import NodeConfig
from swarmnode.experiment.report import (
    per_seed_lines,
    read_rows,
    summarize,
    summarize_external,
    summarize_yardstick,
    yardstick_by_seed,
    yardstick_round,
)
from swarmnode.experiment.runner import Experiment
from swarmnode.experiment.settings import PROFILES, Arm, Cohort, ExperimentError, Settings, parse_arms, parse_cohorts
from swarmnode.train.tasks import Scorer
from tinymodel import build_tiny_model


class _LengthScorer(Scorer):
    """Rewards a random model can vary on: the parity of the response length, so groups have
    signal and get shared; the real verifier would score every tiny-model answer 0."""

    def score(self, question, response):
        return float(len(response) % 2)


def _settings(out: Path, model: Path, rounds: int, configs: str = "2/0,1/1", nodes: int | str = 2,
              eval_every: int = 0) -> Settings:
    # newcomer_share 1: a node's peers are all newcomers for its first probation_rounds, and
    # J = 1 leaves them no slot at the default share; these runs are shorter than that.
    return Settings(profile="laptop", nodes=nodes, configs=configs, rounds=rounds, seeds=1, checkpoint_every=1,
                    out=str(out), node=NodeConfig(questions=2, completions=3, max_new_tokens=4, model=str(model),
                                                  device="cpu", tasks="laptop", learning_rate=1e-3, micro_batch=8,
                                                  newcomer_share=1.0, eval_every=eval_every))


def _run(settings: Settings) -> Experiment:
    exp = Experiment(settings, scorer_factory=_LengthScorer, progress=False)
    exp.run()
    return exp


def test_arm_parsing():
    assert [a.label for a in parse_arms("8/0, 4/4,4/4:rw")] == ["8/0", "4/4", "4/4:rw"]
    assert Arm.parse("4/4:rw").sampling == "reward-weighted"
    assert Arm.parse("4/4:lv").sampling == "level-aware" and Arm.parse("4/4:lv").label == "4/4:lv"
    for bad in ("4", "4/x", "0/0", "4/4:zz", "-1/2"):
        with pytest.raises(ExperimentError):
            Arm.parse(bad)
    with pytest.raises(ExperimentError):
        parse_arms("4/4,4/4")
    assert PROFILES["paper"]["nodes"] == 8 and PROFILES["paper"]["rounds"] == 2000
    for profile in PROFILES.values():
        NodeConfig(**profile["node"])  # every profile's node settings are config keys


def test_tiny_run_outputs_sharing_and_resume(tmp_path, tiny_model_dir):
    out = tmp_path / "exp"
    exp = _run(_settings(out, tiny_model_dir, rounds=2))
    rows = read_rows(out / "rounds.csv")
    assert len(rows) == 2 * 2 * 2  # configs x nodes x rounds
    assert {(r["config"], r["node"], r["round"]) for r in rows} == \
        {(c, str(n), str(r)) for c in ("2/0", "1/1") for n in (0, 1) for r in (0, 1)}
    assert (out / "rewards.png").stat().st_size > 1000
    # Round 0 (adapters still equal everywhere): every config sampled the same completions.
    first = {(r["config"], r["node"]): r["reward_mean"] for r in rows if r["round"] == "0"}
    assert all(first[("2/0", n)] == first[("1/1", n)] for n in ("0", "1"))

    # External groups only where J > 0, and a node's own groups never come back to it.
    assert all(r["n_external"] == "0" for r in rows if r["config"] == "2/0")
    assert any(int(r["n_external"]) > 0 for r in rows if r["config"] == "1/1")
    assert all(r["bundles_rejected"] == "0" for r in rows)
    for m in exp.members:
        stats = m.exchange.pool.stats()["by_peer"]
        assert m.identity.peer_id not in stats
        assert (sum(stats.values()) > 0) == (m.arm.external > 0)

    # Every node's own groups, a row each: their means average to the round's reward, and a
    # group has signal exactly when its completions' rewards differ.
    groups = read_rows(out / "groups.csv")
    assert len(groups) == len(rows) * 2  # two questions a round
    for r in rows:
        mine = [g for g in groups if (g["config"], g["node"], g["round"]) == (r["config"], r["node"], r["round"])]
        assert len(mine) == 2 and {g["family"] for g in mine} <= {"calendar_arithmetic", "chain_sum"}
        assert sum(float(g["reward_mean"]) for g in mine) / 2 == pytest.approx(float(r["reward_mean"]), abs=1e-5)
        for g in mine:
            right, n = int(g["right"]), int(g["responses"])
            assert n == 3 and g["signal"] == str(int(0 < right < n))  # the length-parity scorer gives 0 or 1
        assert int(r["n_dropped_zero_adv"]) == sum(g["signal"] == "0" for g in mine)
        # What entered the update: n_local of its own groups, each with its mean token log-prob.
        assert sum(g["trained"] == "1" for g in mine) == int(r["n_local"])
        assert all((g["logp"] != "") == (g["trained"] == "1") for g in mine)
        assert all(float(g["logp"]) < 0 for g in mine if g["logp"])
    # A peer's group: the receiver trained on it, so it has the receiver's log-prob, and its
    # question is one its sender was asked that round or before (the pool keeps groups a while).
    external = read_rows(out / "external.csv")
    assert external and all(e["logp"] and float(e["logp"]) < 0 for e in external)
    for e in external:
        assert any((g["config"], g["node"], g["question"]) == (e["config"], e["sender"], e["question"])
                   and int(g["round"]) <= int(e["round"]) for g in groups)

    # The summary's cumulative rewards are the CSV's sums.
    text = (out / "summary.md").read_text()
    for config in ("2/0", "1/1"):
        total = sum(float(r["reward_mean"]) for r in rows if r["config"] == config)
        m = re.search(rf"^\| {re.escape(config)} \| {tiny_model_dir.name} \| ([0-9.]+) \|", text, re.M)
        assert m and float(m.group(1)) == pytest.approx(total, abs=0.006)
    assert summarize(rows, ["2/0", "1/1"])["rounds_by_seed"] == {0: 2}
    (out / "summary.md").unlink()
    assert Experiment(_settings(out, tiny_model_dir, rounds=2), progress=False).report().read_text() == text
    with pytest.raises(ExperimentError, match="nothing to report"):
        Experiment(_settings(tmp_path / "none", tiny_model_dir, rounds=2), progress=False).report()

    # Resume: a run killed after round 2's rows were written but before its checkpoint redoes
    # round 2 and continues to round 3, without duplicate rows; rounds 0-1 stay as they were.
    with open(out / "rounds.csv", "a", newline="") as fh:
        csv.writer(fh).writerow(["2/0", 0, 0, 2, 0.5, 0, 1.0, 2, 0, "", 0])
    _run(_settings(out, tiny_model_dir, rounds=4))
    again = read_rows(out / "rounds.csv")
    keys = [(r["config"], r["seed"], r["node"], r["round"]) for r in again]
    assert len(keys) == len(set(keys)) == 2 * 2 * 4
    assert again[:len(rows)] == rows


def test_nodes_draw_as_a_real_node_does_one_peer_gets_at_most_its_share(tmp_path, tiny_model_dir):
    """Two nodes, J = 2: the node's own draw caps one peer at ceil(max_peer_share * J) = 1 group a
    round (the old harness drew with no cap and took both)."""
    _run(_settings(tmp_path / "exp", tiny_model_dir, rounds=3, configs="1/2"))
    rows = read_rows(tmp_path / "exp" / "rounds.csv")
    assert {int(r["n_external"]) for r in rows} <= {0, 1}
    assert any(r["n_external"] == "1" for r in rows)


def test_resume_refuses_other_settings(tmp_path, tiny_model_dir):
    out = tmp_path / "exp"
    _run(_settings(out, tiny_model_dir, rounds=1, configs="2/0"))
    with pytest.raises(ExperimentError, match="other settings"):
        _run(_settings(out, tiny_model_dir, rounds=1, configs="1/1"))


def test_cli_rejects_bad_configs(tiny_model_dir, tmp_path, capsys):
    from swarmnode.cli import main

    assert main(["experiment", "--configs", "4/x", "--model", str(tiny_model_dir), "--out", str(tmp_path)]) == 2
    assert "is not I/J" in capsys.readouterr().err
    assert main(["experiment", "--nodes", "1", "--configs", "1/1", "--model", str(tiny_model_dir),
                 "--out", str(tmp_path)]) == 2


def test_help_lists_every_flag(capsys):
    """The node settings' help texts may hold a '%' (argparse formats help with %)."""
    from swarmnode.cli import main

    with pytest.raises(SystemExit) as done:
        main(["experiment", "--help"])
    assert done.value.code == 0 and "--eval-every" in capsys.readouterr().out


class _RightScorer(Scorer):
    """Every answer right: each family's level climbs once it has a window of groups."""

    def score(self, question, response):
        return 1.0


def test_levels_move_in_the_experiment_and_survive_a_resume(tmp_path, tiny_model_dir):
    out = tmp_path / "exp"
    settings = _settings(out, tiny_model_dir, rounds=4, configs="2/0")
    exp = Experiment(settings, scorer_factory=_RightScorer, progress=False)
    exp.run()
    rows = read_rows(out / "rounds.csv")
    climbed = {m.index: {f: lv for f, lv in m.node.levels.levels.items() if lv > m.start_levels[f]}
               for m in exp.members}
    assert all(climbed.values()), f"every node climbed in 4 rounds of right answers: {climbed}"
    last = {r["node"]: int(r["levels_up"]) for r in rows if r["round"] == "3"}
    assert last == {str(m.index): len(climbed[m.index]) for m in exp.members}
    assert re.search(r"^\| 2/0 \|.*\| [0-9.]+ \| n/a \| \d+ \|$", (out / "summary.md").read_text(), re.M)
    levels = {m.index: dict(m.node.levels.levels) for m in exp.members}
    resumed = Experiment(_settings(out, tiny_model_dir, rounds=5, configs="2/0"), scorer_factory=_RightScorer,
                         progress=False)
    resumed._load()
    resumed._build_members(0)
    assert resumed._restore(0, 3)
    assert {m.index: dict(m.node.levels.levels) for m in resumed.members} == levels


def test_more_rounds_on_the_command_line_extend_a_run_and_leave_the_node_settings_alone():
    from swarmnode.cli import build_parser
    from swarmnode.cli.experiment import settings_from_args

    def settings(*flags):
        return settings_from_args(build_parser().parse_args(["experiment", "--out", "x", *flags]))

    short, longer = settings("--rounds", "10"), settings("--rounds", "20")
    assert (short.rounds, longer.rounds) == (10, 20)
    assert short.node.rounds is None and short.fingerprint() == longer.fingerprint(), "a resume with more rounds"
    split = settings("--seeds", "2", "--first-seed", "3")
    assert list(split.seed_numbers) == [3, 4] and list(short.seed_numbers) == [0]
    assert split.fingerprint() == settings("--seeds", "2").fingerprint(), "which seeds run is no setting of a round"


def test_nodes_parse_as_a_count_or_models_with_counts(tmp_path):
    assert parse_cohorts(4, "embedded") == parse_cohorts("4", "embedded") == [Cohort("embedded", 4)]
    assert parse_cohorts("smollm2-135m:3, qwen2.5-coder-0.5b:1", "embedded") == \
        [Cohort("smollm2-135m", 3), Cohort("qwen2.5-coder-0.5b", 1)]
    local = tmp_path / "my-model"
    local.mkdir()
    assert parse_cohorts(f"{local}:2,embedded:1", "x")[0].label == "my-model"
    for bad in ("smollm2-135m", "a:0", "a:x", ":3", "a:1,,b:1", "a:1,a:2"):
        with pytest.raises(ExperimentError, match="--nodes"):
            parse_cohorts(bad, "embedded")
    s = _settings(tmp_path, tmp_path, rounds=1, nodes="a:2,b:1")
    assert s.node_count == 3 and [s.cohort_of(k).model for k in range(3)] == ["a", "a", "b"]
    assert _settings(tmp_path, tmp_path, rounds=1, nodes="4").nodes == 4  # resumes runs that stored a count
    with pytest.raises(ExperimentError, match="2 or more"):
        _settings(tmp_path, tmp_path, rounds=1, nodes="a:1")


def test_a_mixed_run_loads_each_model_once_and_reports_each_models_nodes_apart(tmp_path, tiny_model_dir):
    """Two tiny models of different sizes: node k is on the same model in every config, the
    nodes of one model share one copy of it, bundles cross models (re-scored by the receiver),
    and every output keeps each model's nodes apart."""
    other = build_tiny_model(tmp_path / "tiny-wide", seed=1, hidden=48)
    out = tmp_path / "exp"
    exp = _run(_settings(out, tiny_model_dir, rounds=2, nodes=f"{tiny_model_dir}:2,{other}:1", eval_every=1))
    a, b = tiny_model_dir.name, other.name
    assert len(exp.bases) == 2
    for label in (a, b):
        assert len({id(m.node.policy.model) for m in exp.members if m.model == label}) == 1
    rows = read_rows(out / "rounds.csv")
    assert len(rows) == 2 * 3 * 2  # configs x nodes x rounds
    assert {(r["node"], r["model"]) for r in rows} == {("0", a), ("1", a), ("2", b)}

    external = read_rows(out / "external.csv")
    assert external and all(e["config"] == "1/1" for e in external)
    assert {(e["model"], e["sender_model"]) for e in external} >= {(b, a)}, "the odd model learns from the others"
    assert all(e["sender"] != e["node"] for e in external)
    per_node_round = {(r["config"], r["node"], r["round"]): int(r["n_external"]) for r in rows}
    for key, n in per_node_round.items():
        assert n == sum((e["config"], e["node"], e["round"]) == key for e in external)

    ys = read_rows(out / "yardstick.csv")
    assert sorted((y["config"], y["model"]) for y in ys if y["config"] == "base") == [("base", a), ("base", b)]
    assert {(y["config"], y["node"], y["round"]) for y in ys if y["config"] != "base"} == \
        {(c, str(n), str(r)) for c in ("2/0", "1/1") for n in range(3) for r in (1, 2)}

    summary = summarize(rows, ["2/0", "1/1"])
    assert set(summary["cells"]) == {(c, m) for c in ("2/0", "1/1") for m in (a, b)}
    for (config, model), cell in summary["cells"].items():
        assert cell["cumulative"][0] == pytest.approx(
            sum(float(r["reward_mean"]) for r in rows if (r["config"], r["model"]) == (config, model)))
        base = summary["cells"][("2/0", model)]["cumulative"][0]
        assert cell["ratio"][0] == pytest.approx(cell["cumulative"][0] / base)
    text = (out / "summary.md").read_text()
    assert f"3 nodes (2 {a}, 1 {b}) per config" in text
    for config in ("2/0", "1/1"):
        for model in (a, b):
            assert re.search(rf"^\| {re.escape(config)} \| {model} \| [0-9.]+ \|", text, re.M)
    assert re.search(rf"^\| 1/1 \| {b} \| [0-9.]+ \| {a} \|", text, re.M), "what the odd model drew, by sender"

    # A resume redoes the rounds after the last checkpoint in every table, without duplicates.
    (out / "nodes" / "seed-0" / "2-0" / "node-0" / "checkpoints" / "round-000001").rename(out / "moved")
    _run(_settings(out, tiny_model_dir, rounds=2, nodes=f"{tiny_model_dir}:2,{other}:1", eval_every=1))
    for name, key in (("rounds.csv", ("config", "node", "round")), ("yardstick.csv", ("config", "node", "round"))):
        again = [tuple(r[k] for k in key) for r in read_rows(out / name)]
        assert len(again) == len(set(again)), name
    assert len(read_rows(out / "rounds.csv")) == 12 and len(read_rows(out / "yardstick.csv")) == 2 + 12
    external = read_rows(out / "external.csv")
    for r in read_rows(out / "rounds.csv"):
        assert int(r["n_external"]) == sum((e["config"], e["node"], e["round"]) == (r["config"], r["node"], r["round"])
                                           for e in external)


def test_what_nodes_trained_on_counts_only_rounds_the_run_finished():
    """A stopped run may have written some external rows of the round it was in (each node's
    after its update) and no round row: those rows are not in the report."""
    rows = [{"config": "4/4", "seed": "0", "node": str(k), "round": "0", "model": "small"} for k in range(2)]
    external = [{"config": "4/4", "seed": "0", "node": "0", "round": rd, "model": "small", "sender_model": "big",
                 "family": "gcd", "reward_mean": mean, "right": right, "responses": "4"}
                for rd, mean, right in (("0", "0.5", "2"), ("0", "0.25", "1"), ("1", "0.0", "0"))]
    got = summarize_external(external, rows)[("4/4", "small")]
    assert got["node_rounds"] == 2 and got["per_round"] == 1.0
    assert got["from"]["big"] == {"per_round": 1.0, "reward": 0.375, "with_right": 1.0, "families": {"gcd": 2}}


def _outcome(out: Path) -> dict[str, list[tuple]]:
    """What a run computed, by table: every row but its timings, in a fixed order."""
    tables = {}
    for name in ("rounds.csv", "external.csv", "groups.csv"):
        rows = [tuple((k, v) for k, v in r.items() if k != "seconds") for r in read_rows(out / name)]
        tables[name] = sorted(rows)
    return tables


def test_a_stopped_and_resumed_run_and_interleaved_seeds_compute_what_an_uninterrupted_run_does(
        tmp_path, tiny_model_dir):
    """Three nodes, J = 4 at the default newcomer share (a newcomer crowd gets 1 of the 4 slots
    until its members are established, after 3 rounds of useful bundles): the checkpoint carries
    each node's pool, its peers' standing and its own recent rewards, so a run stopped after
    round 1 and resumed, and seeds that take turns of one round each (every turn a resume),
    give the very rows of runs that never stopped, as does a seed run alone from --first-seed;
    the peers are established by round 3."""
    def settings(out: Path, rounds: int, seeds: int, checkpoint_every: int, first_seed: int = 0) -> Settings:
        return Settings(profile="laptop", nodes=3, configs="2/0,2/4:ao", rounds=rounds, seeds=seeds,
                        checkpoint_every=checkpoint_every, out=str(out), first_seed=first_seed,
                        node=NodeConfig(questions=4, completions=3, max_new_tokens=4, model=str(tiny_model_dir),
                                        device="cpu", tasks="laptop", learning_rate=1e-3, micro_batch=8))

    rounds = 5
    straight = tmp_path / "straight"  # one seed after the other, no checkpoint read back
    _run(settings(straight, rounds, seeds=2, checkpoint_every=rounds))
    stopped = tmp_path / "stopped"  # seeds in turns of one round; stopped after round 1 of each
    _run(settings(stopped, 2, seeds=2, checkpoint_every=1))
    _run(settings(stopped, rounds, seeds=2, checkpoint_every=1))
    assert _outcome(stopped) == _outcome(straight)
    split = tmp_path / "split"  # seed 1 alone, as a second process would run it
    _run(settings(split, rounds, seeds=1, checkpoint_every=rounds, first_seed=1))
    assert _outcome(split) == {name: [r for r in rows if ("seed", "1") in r]
                               for name, rows in _outcome(straight).items()}

    rows = read_rows(straight / "rounds.csv")
    late = [int(r["n_external"]) for r in rows if r["config"] == "2/4:ao" and int(r["round"]) >= 3]
    assert max(late) > 1, "established peers fill more than the newcomers' one slot"


def test_a_partial_runs_yardstick_is_the_last_one_every_seed_has():
    """Seeds stopped at rounds 7 and 6 with yardsticks every 5 rounds: both have the one after
    round 5, only one the one after 10 (past seed 1's rounds), so 5 is reported."""
    def row(seed, rnd, score):
        return {"config": "4/4", "seed": str(seed), "node": "0", "model": "m", "round": str(rnd), "score": str(score)}
    rows = [row(0, 5, 0.2), row(1, 5, 0.4), row(0, 10, 0.9), row(1, 10, 0.9),
            {"config": "base", "seed": "", "node": "0", "model": "m", "round": "0", "score": "0.1"}]
    assert yardstick_round(rows, {0: 11, 1: 7}) == 5
    got = summarize_yardstick(rows, {0: 11, 1: 7})
    assert got[("4/4", "m")][0] == pytest.approx(0.3) and got[("base", "m")] == (0.1, None)
    assert yardstick_round(rows, {0: 11, 1: 11}) == 10 and yardstick_round(rows, {0: 4, 1: 4}) is None


def test_the_seed_by_seed_section_pairs_each_config_with_the_baseline_in_the_same_seed():
    """Two seeds of one round, two nodes a config: ratios of the seeds' cumulative rewards, and
    the yardstick difference taken per seed (0.2 and 0.1), not of the means."""
    def rnd(config, seed, node, reward):
        return {"config": config, "seed": str(seed), "node": str(node), "round": "0", "model": "m",
                "reward_mean": str(reward), "seconds": "1"}

    def yard(config, seed, node, score):
        return {"config": config, "seed": str(seed), "node": str(node), "round": "1", "model": "m", "score": str(score)}
    rows = [rnd("8/0", 0, 0, 0.1), rnd("8/0", 0, 1, 0.1), rnd("8/0", 1, 0, 0.2), rnd("8/0", 1, 1, 0.2),
            rnd("4/4", 0, 0, 0.3), rnd("4/4", 0, 1, 0.1), rnd("4/4", 1, 0, 0.2), rnd("4/4", 1, 1, 0.4)]
    scores = [yard("8/0", 0, 0, 0.1), yard("8/0", 0, 1, 0.3), yard("8/0", 1, 0, 0.5), yard("8/0", 1, 1, 0.5),
              yard("4/4", 0, 0, 0.4), yard("4/4", 0, 1, 0.4), yard("4/4", 1, 0, 0.6), yard("4/4", 1, 1, 0.6)]
    summary = summarize(rows, ["8/0", "4/4"])
    by_seed = yardstick_by_seed(scores, summary["rounds_by_seed"])
    assert by_seed[("4/4", "m")] == {0: pytest.approx(0.4), 1: pytest.approx(0.6)}
    line = per_seed_lines(summary, by_seed)[-1]
    # mean 0.15, sd 0.0707, 2 seeds: half-width 12.706 * 0.0707 / sqrt(2) = 0.635
    assert line == ("| 4/4 | m | 2.00 / 1.50 | 0.400 / 0.600 | 0.200 / 0.500 | "
                    "0.150 (-0.485 to 0.785), per seed 0.200 / 0.100 |")
    assert per_seed_lines(summarize([r for r in rows if r["config"] == "8/0"], ["8/0"]), by_seed) == []


def test_the_experiment_takes_a_catalogue_model_from_model_file_as_start_does(tmp_path, monkeypatch, capsys):
    from swarmnode.cli import main

    monkeypatch.setenv("SWARMNODE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # never the network: the file given is all there is
    wrong = tmp_path / "wrong.gguf"
    wrong.write_bytes(b"GGUF not the model")
    assert main(["experiment", "--model", "qwen2.5-coder-0.5b", "--model-file", str(wrong), "--nodes", "2",
                 "--configs", "2/0", "--rounds", "1", "--out", str(tmp_path / "exp"), "--no-progress"]) == 2
    assert f"model_file {wrong} is not Qwen2.5-Coder-0.5B-Instruct" in capsys.readouterr().err
