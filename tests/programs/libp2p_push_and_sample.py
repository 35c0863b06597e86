"""Announcement pushes and samples of the libp2p transport on four real hosts on 127.0.0.1:
prints one JSON object of checks.

Run by tests/test_libp2p_pull.py in a process of its own (py-libp2p cannot share one with
hivemind). A pusher pushes to a public node another peer's announcement, garbage, and two of
its own within PUSH_EVERY, then one more once the public node has blocked it; a sampler asks
the public node for a sample, and asks a liar, which answers samples with junk beside a true
announcement. Then asks by name: the sampler asks the public node for the pusher's and the
public node's own latest announcements, sends it garbage for a request, and asks the liar,
which answers with junk, another author's announcement and a true one of its own.
"""

import asyncio
import json

from swarmnode.swarm.bundle import canonical_json
from swarmnode.swarm.transport.libp2p.announce import Announcement
from swarmnode.swarm.transport.libp2p.named import NAMED_PROTOCOL, named_request
from swarmnode.swarm.transport.libp2p.spread import ANNOUNCE_PROTOCOL, PUSH_EVERY, SAMPLE_PROTOCOL
from swarmnode.swarm.transport.libp2p.streams import exchange
from swarmnode.swarm.transport.libp2p.transport import Libp2pTransport
from transport_node import identity_for
from waiting import wait_until_async

SW, LISTEN = "sw", "/ip4/127.0.0.1/tcp/0"
# A push is read at most once a PUSH_EVERY of its pusher: a push meant to be read waits that long
# after the last one read (a duration the pacing sets, not an event to wait for).
PACE_S = PUSH_EVERY + 0.2
# How long a push refused unread is watched for a note that must not come (a duration: nothing
# marks "refused").
QUIET_S = 0.5


def announcement(t: Libp2pTransport, round_no: int) -> bytes:
    peer = t.identity.peer_id
    return canonical_json(Announcement(peer, SW, round_no, 1000, "cd" * 32, (peer,)).signed(t.identity))


async def main() -> None:
    out = {}
    public = Libp2pTransport(identity_for(1), SW, listen=LISTEN, fetch_per_round=0)  # it asks no one
    rejected, noted = [], []
    public.set_reject_handler(lambda author, reason: rejected.append([author, reason]))
    heard = public._heard
    public._heard = lambda news: (noted.extend((a.author, a.round) for a in news), heard(news))
    await public.start()
    boot = public.addresses()[:1]
    pusher, sampler, liar = (Libp2pTransport(identity_for(i), SW, boot, LISTEN, fetch_per_round=0) for i in (2, 3, 4))

    async def junk_and_truth(asker, request):
        return canonical_json(["junk", Announcement(liar.identity.peer_id, SW, 9, 1000, "ef" * 32,
                                                    (liar.identity.peer_id,)).signed(liar.identity)])

    async def named_junk(asker, request):
        other = Announcement(public.identity.peer_id, SW, 6, 1000, "ab" * 32, (public.identity.peer_id,))
        return canonical_json(["junk", other.signed(public.identity),
                               Announcement(liar.identity.peer_id, SW, 10, 1000, "ef" * 32,
                                            (liar.identity.peer_id,)).signed(liar.identity)])

    liar._answer_sample = junk_and_truth
    liar._answer_named = named_junk
    for t in (pusher, sampler, liar):
        await t.start()
    await wait_until_async(lambda: len(public.peers()) >= 3, 30, "three peers to join the public node")

    def to_public(t, data):
        return t._bridge.run(exchange, t._host, public._host.get_id(), ANNOUNCE_PROTOCOL, data, 0)

    # Each exchange returns once the public node has read the push and closed the stream.
    await to_public(pusher, announcement(sampler, 1))  # someone else's, signed by its author
    await wait_until_async(lambda: len(rejected) == 1, 10, "another peer's announcement refused")
    await asyncio.sleep(PACE_S)
    await to_public(pusher, b"{not json")
    await wait_until_async(lambda: len(rejected) == 2, 10, "garbage refused")
    await asyncio.sleep(PACE_S)
    await to_public(pusher, announcement(pusher, 2))
    await to_public(pusher, announcement(pusher, 3))  # within PUSH_EVERY of the last: dropped unread
    await wait_until_async(lambda: noted, 10, "the pusher's own announcement noted")
    await asyncio.sleep(QUIET_S)
    out["rejected"] = rejected
    out["noted"] = list(noted)

    async def ban_in_host():  # as a relay's hold filter does
        public.block(pusher.identity.peer_id, 60)

    await public._bridge.run(ban_in_host)
    await wait_until_async(lambda: pusher.identity.peer_id not in map(str, public._host.get_connected_peers()), 10,
                           "the blocked pusher to be disconnected")
    await asyncio.sleep(PACE_S)
    await to_public(pusher, announcement(pusher, 4))  # dials again if it must: read by no one
    await asyncio.sleep(QUIET_S)
    out["noted after the block"] = noted[len(out["noted"]):]

    sampler_reports = []
    sampler.set_reject_handler(lambda author, reason: sampler_reports.append(reason))
    answer = json.loads(await sampler._bridge.run(exchange, sampler._host, public._host.get_id(), SAMPLE_PROTOCOL,
                                                  b"", 20000))
    out["sample authors"] = sorted(a["announcement"]["author"] == pusher.identity.peer_id for a in answer)
    await sampler._sample(liar.identity.peer_id)
    out["liar's truth noted"] = sampler._pull.plan.detail(liar.identity.peer_id) is not None
    out["sampler's reports"] = list(sampler_reports)

    public._own_announcement = Announcement(public.identity.peer_id, SW, 5, 1000, "ab" * 32,
                                            (public.identity.peer_id,)).signed(public.identity)
    names = [pusher.identity.peer_id, public.identity.peer_id, liar.identity.peer_id]

    async def by_name(wanted):
        return await sampler._bridge.run(exchange, sampler._host, public._host.get_id(), NAMED_PROTOCOL,
                                         named_request(wanted), 20000)

    answer = json.loads(await by_name([(name, 0) for name in names]))
    out["named answer"] = [[a["announcement"]["author"] == p for p in names] for a in answer]
    out["nothing newer"] = json.loads(await by_name([(pusher.identity.peer_id, 2)]))
    garbage = await sampler._bridge.run(exchange, sampler._host, public._host.get_id(), NAMED_PROTOCOL, b"[1,2]", 100)
    out["garbage request"] = [garbage.decode(), public.refusals().get("named_request")]

    await sampler._ask_named(liar.identity.peer_id, [(liar.identity.peer_id, 9)])
    out["liar's named truth noted"] = sampler._pull.plan.announced[liar.identity.peer_id].round
    out["sampler's reports by name"] = sampler_reports[len(out["sampler's reports"]):]
    out["bad named answers"] = sampler.refusals().get("named_answer")
    for t in (pusher, sampler, liar, public):
        await t.stop()
    print(json.dumps(out))


asyncio.run(main())
