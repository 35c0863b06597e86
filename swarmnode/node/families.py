"""Prometheus metric families as ``/metrics`` writes them, and the registry that serves them.

:class:`Families` collects prometheus_client's ``CounterMetricFamily``, ``GaugeMetricFamily``
and ``SummaryMetricFamily``, one per name, from the node's state at scrape time
(:mod:`swarmnode.node.prometheus`, :mod:`swarmnode.node.gainmetrics`,
:mod:`swarmnode.node.credits`, :mod:`swarmnode.node.peermetrics`). A counter's name ends in
``_total`` (prometheus_client writes its samples so), none has a ``_created`` sample, and a
missing number (``None``) is written ``NaN``, never a made-up zero.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily

# One sample of a family: its labels and its value (None: not known yet).
Sample = tuple[Mapping[str, str], float | None]


def _value(value: float | None) -> float:
    return math.nan if value is None else value


def _labelnames(name: str, samples: Sequence[Sample]) -> list[str]:
    """The label names every sample of family ``name`` has (the first one's, in its order)."""
    names = list(samples[0][0]) if samples else []
    for labels, _ in samples:
        if sorted(labels) != sorted(names):
            raise ValueError(f"{name}: samples with labels {sorted(labels)} and {sorted(names)}")
    return names


class Families:
    """The families of one scrape, in the order they were added."""

    def __init__(self) -> None:
        self.metrics: list[Metric] = []

    def counter(self, name: str, help_text: str, samples: Sequence[Sample]) -> None:
        """A counter family; ``name`` ends in ``_total``."""
        if not name.endswith("_total"):
            raise ValueError(f"a counter's name ends in _total: {name}")
        names = _labelnames(name, samples)
        family = CounterMetricFamily(name, help_text, labels=names)
        for labels, value in samples:
            family.add_metric([labels[n] for n in names], _value(value))
        self.metrics.append(family)

    def gauge(self, name: str, help_text: str, samples: Sequence[Sample]) -> None:
        names = _labelnames(name, samples)
        family = GaugeMetricFamily(name, help_text, labels=names)
        for labels, value in samples:
            family.add_metric([labels[n] for n in names], _value(value))
        self.metrics.append(family)

    def summary(self, name: str, help_text: str, count: int, total: float) -> None:
        """A summary without quantiles: ``<name>_count`` and ``<name>_sum``."""
        family = SummaryMetricFamily(name, help_text, labels=[])
        family.add_metric([], count_value=count, sum_value=total)
        self.metrics.append(family)


class _AtScrape:
    """A collector whose families ``families()`` makes at each scrape."""

    def __init__(self, families: Callable[[], Iterable[Metric]]) -> None:
        self._families = families

    def collect(self) -> Iterable[Metric]:
        return self._families()


def registry_of(families: Callable[[], Iterable[Metric]]) -> CollectorRegistry:
    """A registry of its own (never prometheus_client's global one, which would carry the
    process's metrics and another node's in the same process) serving ``families()``."""
    registry = CollectorRegistry()
    registry.register(_AtScrape(families))
    return registry
