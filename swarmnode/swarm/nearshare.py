"""How much of each peer's recent completions, per family, this node's updates kept.

The update leaves out a peer's completion too far from this node's policy
(:mod:`swarmnode.train.nearness`): it trained nothing, yet took one of the round's J external
slots. :class:`NearShare` remembers, per sender and family, whether each of the last
:data:`WINDOW` completions the update weighed was kept, so that the draw can weigh a group by
how likely its completions are to be trained on (``weigh_draw_by_nearness``;
:class:`swarmnode.sampling.NearWeighted`). A pair never weighed counts as half kept. With
``skip_rounds``, a pair the last update that weighed it left mostly out is skipped by the draws
of the next that many rounds (``skip_far_peer_rounds``; :class:`swarmnode.sampling.NearSkipping`),
its slots going to this node's own groups, and drawn again after them, so a peer whose policy
came nearer is measured anew.

Bounded: past :data:`MAX_PAIRS` (sender, family) pairs the least recently weighed one leaves.
Used from the round's thread only (the update writes it, the next draw reads it).
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Mapping

# Completions remembered per (sender, family): about four rounds of one peer's groups at the
# laptop sizes (J = 4 groups of 4 completions), so a policy that has moved is soon re-measured.
WINDOW = 16
MAX_PAIRS = 4096


class NearShare:
    def __init__(self, window: int = WINDOW, max_pairs: int = MAX_PAIRS, skip_rounds: int = 0):
        self.window, self.max_pairs, self.skip_rounds = window, max_pairs, skip_rounds
        self._kept: OrderedDict[tuple[str, str], deque[bool]] = OrderedDict()
        self.updates = 0  # the updates noted: the clock of the skips
        self._skip_until: dict[tuple[str, str], int] = {}

    def note(self, weighed: Mapping[tuple[str, str], tuple[int, int]]) -> None:
        """One update's ``(sender, family) -> (completions weighed, of them left out as far)``;
        called once per update, with or without peers' completions in it."""
        self.updates += 1
        self._skip_until = {pair: until for pair, until in self._skip_until.items() if until > self.updates}
        for pair, (n, far) in weighed.items():
            recent = self._kept.pop(pair, None) or deque(maxlen=self.window)
            recent.extend([False] * far + [True] * (n - far))
            self._kept[pair] = recent
            if len(self._kept) > self.max_pairs:
                self._kept.popitem(last=False)
            if self.skip_rounds and 2 * far > n:
                self._skip_until[pair] = self.updates + self.skip_rounds
            else:
                self._skip_until.pop(pair, None)

    def skipped(self, sender: str, family: str) -> bool:
        """Whether the next draw passes over the pair: the last update that weighed it left more
        than half of its completions out, fewer than ``skip_rounds`` updates ago."""
        return self._skip_until.get((sender, family), 0) > self.updates

    def share(self, sender: str, family: str) -> float:
        """The kept share of the pair's recent completions, smoothed: ``(kept + 1) / (weighed + 2)``."""
        recent = self._kept.get((sender, family), ())
        return (sum(recent) + 1) / (len(recent) + 2)

    def to_json(self) -> dict:
        """``{"kept": [[sender, family, [kept, ...]], ...], "updates": n, "skip": [[sender, family,
        until], ...]}``, least recently weighed first, for :meth:`restore`."""
        return {"kept": [[sender, family, list(recent)] for (sender, family), recent in self._kept.items()],
                "updates": self.updates, "skip": [[s, f, until] for (s, f), until in self._skip_until.items()]}

    def restore(self, state: dict | list) -> None:
        """Take :meth:`to_json`'s record back, or the bare ``kept`` rows of a release before skips;
        ValueError, and nothing changed, when it is neither."""
        if isinstance(state, list):
            state = {"kept": state}
        try:
            kept = OrderedDict(((str(s), str(f)), deque((bool(x) for x in recent), maxlen=self.window))
                               for s, f, recent in state["kept"])
            updates = int(state.get("updates", 0))
            skip = {(str(s), str(f)): int(until) for s, f, until in state.get("skip", [])}
        except (AttributeError, KeyError, TypeError, ValueError):
            raise ValueError('near shares are not {"kept": [[sender, family, [kept, ...]], ...], '
                             '"updates": n, "skip": [[sender, family, until], ...]}') from None
        self._kept, self.updates, self._skip_until = kept, updates, skip
