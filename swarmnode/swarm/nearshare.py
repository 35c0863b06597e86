"""How much of each peer's recent completions, per family, this node's updates kept.

The update leaves out a peer's completion too far from this node's policy
(:mod:`swarmnode.train.nearness`): it trained nothing, yet took one of the round's J external
slots. :class:`NearShare` remembers, per sender and family, whether each of the last
:data:`WINDOW` completions the update weighed was kept, so that the draw can weigh a group by
how likely its completions are to be trained on (``weigh_draw_by_nearness``;
:class:`swarmnode.sampling.NearWeighted`). A pair never weighed counts as half kept.

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
    def __init__(self, window: int = WINDOW, max_pairs: int = MAX_PAIRS):
        self.window, self.max_pairs = window, max_pairs
        self._kept: OrderedDict[tuple[str, str], deque[bool]] = OrderedDict()

    def note(self, weighed: Mapping[tuple[str, str], tuple[int, int]]) -> None:
        """One update's ``(sender, family) -> (completions weighed, of them left out as far)``."""
        for pair, (n, far) in weighed.items():
            recent = self._kept.pop(pair, None) or deque(maxlen=self.window)
            recent.extend([False] * far + [True] * (n - far))
            self._kept[pair] = recent
            if len(self._kept) > self.max_pairs:
                self._kept.popitem(last=False)

    def share(self, sender: str, family: str) -> float:
        """The kept share of the pair's recent completions, smoothed: ``(kept + 1) / (weighed + 2)``."""
        recent = self._kept.get((sender, family), ())
        return (sum(recent) + 1) / (len(recent) + 2)

    def to_json(self) -> list:
        """``[[sender, family, [kept, ...]], ...]``, least recently weighed first, for :meth:`restore`."""
        return [[sender, family, list(recent)] for (sender, family), recent in self._kept.items()]

    def restore(self, state: list) -> None:
        """Take :meth:`to_json`'s rows back; ValueError, and nothing changed, when they are not of its form."""
        try:
            kept = OrderedDict(((str(s), str(f)), deque((bool(x) for x in recent), maxlen=self.window))
                               for s, f, recent in state)
        except (TypeError, ValueError):
            raise ValueError("near shares are not [[sender, family, [kept, ...]], ...]") from None
        self._kept = kept
