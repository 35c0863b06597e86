"""The one backoff (swarmnode.backoff): what the join loop, the libp2p host's revival, an
awaited round and the dashboard's reconnecting each get from it."""

from __future__ import annotations

import random

import pytest

from swarmnode.backoff import Backoff
from swarmnode.swarm.transport.freshness import AWAIT_ASKS, AWAIT_RETRY_S, Awaited


def test_without_jitter_it_doubles_to_its_cap_and_starts_over_on_reset():
    backoff = Backoff(0.5, 5.0, jitter=0.0)  # the dashboard's reconnecting
    assert [backoff.next_delay() for _ in range(6)] == [0.5, 1.0, 2.0, 4.0, 5.0, 5.0]
    backoff.reset()
    assert backoff.upcoming == 0.5 and backoff.next_delay() == 0.5


def test_jitter_draws_from_the_given_generator_as_the_join_loop_always_did():
    """+-20 % from ``rng``: the same draws as ``rng.uniform(0.8, 1.2)``, so a simulated swarm's
    random stream, and its results, are those of before."""
    backoff, draws = Backoff(1.0, 8.0, random.Random(7)), random.Random(7)
    assert [backoff.next_delay() for _ in range(5)] == [d * draws.uniform(0.8, 1.2) for d in (1, 2, 4, 8, 8)]


def test_no_jitter_draws_nothing():
    rng = random.Random(3)
    state = rng.getstate()
    Backoff(1.0, 8.0, rng, jitter=0.0).next_delay()
    assert rng.getstate() == state


def test_an_awaited_round_is_asked_for_again_after_2_4_8_and_16_s():
    awaited = Awaited(next=5, due=0.0, until=1000.0)
    assert [awaited.retry.next_delay() for _ in range(AWAIT_ASKS - 1)] == [AWAIT_RETRY_S * 2 ** i for i in range(4)]
    assert Awaited(5, 0.0, 1000.0) == Awaited(5, 0.0, 1000.0)  # its backoff is no part of what it is


@pytest.mark.parametrize("jitter", [-0.1, 1.0])
def test_a_jitter_outside_its_range_is_refused(jitter):
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter=jitter)
