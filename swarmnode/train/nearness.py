"""How far a peer's completion may be from this node's own policy to be trained on.

A peer's completion enters the update in the form :mod:`swarmnode.train.answers` gives it, so
it is one answer this node's verifier read. How likely this node's policy was to write it is
a second bound: the mean log-prob per token of the completion under the policy being updated
must be at most ``gap`` nats below the mean, over this node's own completions in the same
update, of theirs (the *bar*; when the update has none of its own with an advantage, the bar
of the last update that had). Beyond it the completion's advantage is set to zero: it moves
nothing and is counted, per peer, as ``far_from_policy``. Before the node's first own
completion with an advantage there is no bar, and peers' completions are trained on as they
are (and not counted as measured).

Why this measure: its own completions are samples of the policy at the sampling temperature,
so their mean log-prob per token is what "text this policy writes" scores; a peer's answer
the policy would also give scores near it, a string it would not write (words spliced into a
number, another language, markup) scores far below. Per token, so short and long answers
compare. The default gap, 3 nats, is from ``benchmarks/peer_nearness.py`` (the embedded
model untrained, laptop set, 8 questions x 8 samples, seeds 0 and 1): its own samples averaged
-1.99 and -1.96; the right answers' trained forms were at most 1.02 below that, wrong answers
(a digit appended) at most 2.12, the key with words spliced in at least 3.26 (-5.25 at best).

The bar is this update's own mean, so it rises as training makes the policy surer of its own
answers (four SmolLM2-135M nodes sharing: from about -2.0 a token to -0.6 to -0.9 by rounds
20-29, peers' groups beyond 3 nats from 1-6 % to 7-27 %; docs/experiments/equal/drift.py).
Holding peers to the lowest mean the node has had instead did not pay (docs/experiments/bar:
1.04x the cumulative reward, 0.59 to 1.48, and a lower yardstick), and the nodes' text drifted
apart sooner. Keeping every far completion with a positive advantage paid on honest nodes
(docs/experiments/far-positive: 1.10x, 0.79 to 1.41, and a higher yardstick) but is not the
rule: reasoning-gym's verifiers give the key with words spliced in partial credit (0.02-0.07
for the injected strings of ``benchmarks/peer_nearness.py``), so a peer whose other
completions score 0 gives such a string a positive advantage, and this bound is what leaves it
out. Keeping only the far completions scored fully right paid as much (docs/experiments/far-right:
1.12x, 0.86 to 1.38) and is not the rule either: the sender sets the answer key, and a key set
to the words themselves scores them 1 in 10 of the 13 packaged families. What leaves such text
out is this bound, whatever the key says. Holding positive advantages to the first update's bar
paid on the mean (docs/experiments/first-bar: 1.08x, 0.86 to 1.29) at the price of that margin
while the node trains, and waits for more seeds.

Its cost: nothing extra is run. The update already computes every trained token's log-prob
for its loss; this takes the masked mean of each micro-batch's (one reduction over tokens
already in memory) and runs this node's own micro-batches first, so the bar is known before
any peer's completion is weighed. A completion left out has still been run forward and
backward (with a zero advantage): the bound saves no compute, it only decides what counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence


class Nearness:
    """The bar of one policy's updates (see the module docstring); ``gap`` None: no bound."""

    def __init__(self, gap: float | None):
        self.gap = gap
        self.bar: float | None = None  # the last update's own mean log-prob per token
        self._own: list[float] = []
        # this update's peer completions weighed and, of them, left out, by (peer, family)
        self.weighed: dict[tuple[str, str], tuple[int, int]] = {}

    def start(self) -> None:
        """A new update begins: its counts start at zero."""
        self._own, self.weighed = [], {}

    def own(self, means: Sequence[float]) -> None:
        """Mean log-probs per token of this node's own completions in this update."""
        self._own.extend(means)

    def keep(self, means: Sequence[float], sources: Sequence[str], families: Sequence[str]) -> list[bool]:
        """For each peer completion (its mean log-prob per token, its peer, its family), whether it stays in."""
        bar = statistics.fmean(self._own) if self._own else self.bar
        if self.gap is None or bar is None:
            return [True] * len(means)
        out = []
        for mean, source, family in zip(means, sources, families, strict=True):
            near = mean >= bar - self.gap
            n, far = self.weighed.get((source, family), (0, 0))
            self.weighed[source, family] = (n + 1, far + (not near))
            out.append(near)
        return out

    def finish(self) -> None:
        """The update is over: its own completions' mean is the bar until the next one has some."""
        if self._own:
            self.bar = statistics.fmean(self._own)
