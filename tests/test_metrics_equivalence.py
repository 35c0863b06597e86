"""``/metrics`` keeps its series: the text the node and the relay serve now has the families
(name, type) and samples (name, labels, value) the hand-written exposition had, recorded in
``tests/data/metrics_*.prom`` for the states of :mod:`metricsscenario`."""

from __future__ import annotations

import math
import re

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from apifakes import FakeControl, make_state
from metricsscenario import (
    CREDITS,
    DATA,
    HIVEMIND,
    HOLDS,
    LIBP2P,
    QUIET,
    TRANSPORT_STATS,
    filled_peers,
    filled_state,
)
from swarmnode.node.api import ApiServer, MetricsApi
from swarmnode.node.prometheus import relay_families
from swarmnode.paths import NodeHome


def series(text: str) -> tuple[dict[str, str], dict[tuple[str, frozenset], str]]:
    """``text``'s families, name to type as its TYPE lines say, and its samples, (name,
    labels) to value (NaN as "NaN", every other value as a float's repr, so 2 and 2.0 agree)."""
    families = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    samples: dict[tuple[str, frozenset], str] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in samples, f"{key} twice"
            samples[key] = "NaN" if math.isnan(sample.value) else repr(float(sample.value))
    return families, samples


def node_text(tmp_path, state, control: FakeControl) -> str:
    server = ApiServer(state, control, home=NodeHome(tmp_path / "home"))
    return generate_latest(server.registry).decode()


def relay_text(tmp_path, *args) -> str:
    api = MetricsApi(lambda: relay_families(*args), home=NodeHome(tmp_path / "home"))
    return generate_latest(api.registry).decode()


def filled_node(tmp_path) -> str:
    state = filled_state()
    control = FakeControl(filled_peers(), state=state)
    control.stats, control.transport_counters, control.credit_summary = TRANSPORT_STATS, HIVEMIND, CREDITS
    return node_text(tmp_path, state, control)


def solo_node(tmp_path) -> str:
    control = FakeControl([])
    control.stats, control.transport_counters = {}, None
    return node_text(tmp_path, make_state(), control)


@pytest.mark.parametrize("recorded, made", [
    ("metrics_node.prom", filled_node),
    ("metrics_node_solo.prom", solo_node),
    ("metrics_relay_libp2p.prom", lambda tmp: relay_text(tmp, 3, TRANSPORT_STATS, LIBP2P, HOLDS)),
    ("metrics_relay_quiet.prom", lambda tmp: relay_text(tmp, 0, {"published": 0}, QUIET, {})),
])
def test_the_series_are_those_of_the_recorded_text(tmp_path, recorded, made):
    old_families, old_samples = series((DATA / recorded).read_text())
    text = made(tmp_path)
    new_families, new_samples = series(text)
    assert new_families == old_families
    assert set(new_samples) == set(old_samples)
    assert new_samples == old_samples
    assert "_created" not in text


def test_the_recorded_text_has_every_family_filled():
    """The filled node's record shows every family the node writes with a sample, so the
    comparison above covers each (the solo one: those a solo node shows)."""
    families, samples = series((DATA / "metrics_node.prom").read_text())
    with_samples = {name for name, _ in samples}
    empty = [f for f, kind in families.items()
             if not {f, f + "_sum", f + "_count"} & with_samples]
    assert not empty
