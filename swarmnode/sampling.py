"""How a node draws its J external groups from the pool: one strategy per ``external_sampling`` mode.

A mode says which of a peer's pooled groups may be drawn and what each weighs; the pool
(:meth:`swarmnode.swarm.pool.ExternalPool.sample`) draws a peer (each eligible peer equally
likely in ``uniform``, else weighted by the mean weight of its eligible groups), then one of
its groups by those weights, within each peer's share.

- ``uniform``: every group with signal, each weighing 1;
- ``reward-weighted``: a group weighs its mean reward (as this node scored it) plus :data:`REWARD_FLOOR`;
- ``level-aware``: :func:`level_weight`, nearness to this node's own level of the family times its signal;
- ``above-own``: only groups whose mean reward is above this node's own recent mean on their
  family, weighing the difference plus :data:`REWARD_FLOOR`; ``above-best`` likewise above the
  best recent mean it has reached (a bar that does not fall when its own reward does).

:class:`NearWeighted` wraps any of them (``weigh_draw_by_nearness``): each weight times the share
of the group's sender's recent completions of its family that this node's updates kept within
the bound on their distance from its policy, so slots go less to groups the update would leave out.
:class:`NearSkipping` wraps any of them (``skip_far_peer_rounds``): a sender's groups of a family
may not be drawn while :meth:`NearSource.skipped` says so, and their slots go to this node's own groups.

:data:`MODES` is the one registry (name -> class); the config's ``external_sampling`` choices
are its names. A mode is built once, from the config, by :func:`sampling_mode`, and holds what
it reads: the level-aware mode this node's levels, the above- modes its own recent rewards.

Lives in the base layer beside ``records`` (its only import of the project), since ``config``
validates against :data:`MODES`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol

from swarmnode.records import Group

# Added to a group's weight in the reward-based modes, so a group whose responses all scored
# low (yet differ) can still be drawn.
REWARD_FLOOR = 0.05

# A draw's weigher: a group's weight, or None when it may not be drawn.
Weigher = Callable[[Group], "float | None"]


class LevelSource(Protocol):
    """This node's level per family now (``swarmnode.train.curriculum.Levels``)."""

    @property
    def levels(self) -> Mapping[str, int]: ...


class NearSource(Protocol):
    """The kept share of a sender's recent completions of a family, and whether the draw skips
    its groups of it now (``swarmnode.swarm.nearshare.NearShare``)."""

    def share(self, sender: str, family: str) -> float: ...

    def skipped(self, sender: str, family: str) -> bool: ...


class OwnSource(Protocol):
    """This node's own recent rewards per family (``swarmnode.swarm.pool.OwnRewards``)."""

    def means(self) -> Mapping[str, float]: ...

    def bests(self) -> Mapping[str, float]: ...


def mean_reward(group: Group) -> float:
    return sum(group.rewards) / len(group.rewards)


def level_weight(group: Group, levels: Mapping[str, int]) -> float:
    """A group's weight in ``level-aware`` sampling: ``1 / (1 + |its level - this node's level
    of its family|)`` (0.5 where either is unknown, as one level apart), times its signal for
    this node, the spread of its re-scored rewards (population standard deviation, at most 0.5
    for rewards in [0, 1]) plus :data:`REWARD_FLOOR`. A sender's level claim only steers what
    this node draws; its rewards here are this node's own."""
    own = levels.get(group.question.family)
    near = 0.5 if own is None or group.level is None else 1.0 / (1.0 + abs(group.level - own))
    return near * (statistics.pstdev(group.rewards) + REWARD_FLOOR)


class SamplingMode:
    """One ``external_sampling`` mode; subclasses register under their ``NAME``."""

    NAME: ClassVar[str] = ""
    # False: each eligible peer is equally likely (the groups' weights pick within a peer only)
    WEIGHS_PEERS: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.NAME:  # a wrapper of the modes is no mode of its own
            MODES[cls.NAME] = cls

    @classmethod
    def build(cls, levels: LevelSource | None, own: OwnSource) -> SamplingMode:
        """The mode for a node whose levels and own rewards these are (each mode keeps what it reads)."""
        return cls()

    def weigher(self) -> Weigher:
        """The weigher of one draw (what it reads is read once, here)."""
        raise NotImplementedError


MODES: dict[str, type[SamplingMode]] = {}


class Uniform(SamplingMode):
    NAME = "uniform"
    WEIGHS_PEERS = False

    def weigher(self) -> Weigher:
        return lambda g: 1.0


class RewardWeighted(SamplingMode):
    NAME = "reward-weighted"

    def weigher(self) -> Weigher:
        return lambda g: max(mean_reward(g), 0.0) + REWARD_FLOOR


class LevelAware(SamplingMode):
    NAME = "level-aware"

    def __init__(self, levels: LevelSource | None = None):
        self.source = levels  # None: no levels known, every group as one level apart

    @classmethod
    def build(cls, levels: LevelSource | None, own: OwnSource) -> SamplingMode:
        return cls(levels)

    def weigher(self) -> Weigher:
        levels = dict(self.source.levels) if self.source is not None else {}
        return lambda g: level_weight(g, levels)


class AboveOwn(SamplingMode):
    NAME = "above-own"

    def __init__(self, own: OwnSource):
        self.own = own

    @classmethod
    def build(cls, levels: LevelSource | None, own: OwnSource) -> SamplingMode:
        return cls(own)

    def bar(self) -> Mapping[str, float]:
        """Per family, the mean reward a peer's group must be above (0 for a family not yet seen)."""
        return self.own.means()

    def weigher(self) -> Weigher:
        bar = self.bar()

        def weigh(g: Group) -> float | None:
            above = mean_reward(g) - bar.get(g.question.family, 0.0)
            return above + REWARD_FLOOR if above > 0 else None

        return weigh


class AboveBest(AboveOwn):
    NAME = "above-best"

    def bar(self) -> Mapping[str, float]:
        return self.own.bests()


class NearWeighted(SamplingMode):
    """Another mode's weights, each times :meth:`NearSource.share` of the group's sender and
    family; it weighs peers by them too, even around ``uniform``."""

    def __init__(self, inner: SamplingMode, near: NearSource):
        self.inner, self.near = inner, near

    def weigher(self) -> Weigher:
        inner, share = self.inner.weigher(), self.near.share

        def weigh(g: Group) -> float | None:
            w = inner(g)
            return None if w is None else w * share(g.source, g.question.family)

        return weigh


class NearSkipping(SamplingMode):
    """Another mode's weights, except that a group whose sender and family
    :meth:`NearSource.skipped` names may not be drawn."""

    def __init__(self, inner: SamplingMode, near: NearSource):
        self.inner, self.near = inner, near

    def weigher(self) -> Weigher:
        inner, skipped = self.inner.weigher(), self.near.skipped

        def weigh(g: Group) -> float | None:
            return None if skipped(g.source, g.question.family) else inner(g)

        return weigh


def sampling_mode(name: str, levels: LevelSource | None, own: OwnSource) -> SamplingMode:
    """The mode ``name`` (a key of :data:`MODES`) for a node of these levels and own rewards;
    ValueError naming the modes for another name."""
    if name not in MODES:
        raise ValueError(f"sampling mode must be one of {', '.join(MODES)}, not {name!r}")
    return MODES[name].build(levels, own)
