"""A host on the LAN that lies in mDNS: it advertises ``_swarmnode._tcp`` services a node must
drop and count (run it inside a test's network namespace).

``lan_liar.py SWARM TRANSPORT TARGET FLOOD``: one service naming TARGET's host and port under
another PeerID (the address answers, but its handshake shows TARGET's key), one each for
another swarm, another transport and a later version, one whose TXT record is over the size
limit, and FLOOD services of this swarm whose addresses nobody answers. Prints ``ready`` once
all are registered, and withdraws them when stdin closes.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import sys

from zeroconf import IPVersion, ServiceInfo
from zeroconf.asyncio import AsyncZeroconf

from swarmnode.swarm.address import parse_multiaddr
from swarmnode.swarm.identity import Identity
from swarmnode.swarm.lanrecord import LAN_VERSION, SERVICE_TYPE, LanRecord, encode_txt


def fake_id(n: int) -> str:
    return Identity.from_seed(hashlib.sha256(b"lan-liar-%d" % n).digest()).peer_id


def service(peer_id: str, ip: str, port: int, txt: bytes) -> ServiceInfo:
    return ServiceInfo(SERVICE_TYPE, f"{peer_id}.{SERVICE_TYPE}", port=port, properties=txt,
                       server=f"{peer_id}.local.", addresses=[socket.inet_aton(ip)])


def txt_of(swarm: str, transport: str, peer_id: str, ip: str, port: int, version: int = LAN_VERSION) -> bytes:
    return encode_txt(LanRecord(swarm, transport, peer_id, (f"/ip4/{ip}/tcp/{port}/p2p/{peer_id}",), version))


async def main(swarm: str, transport: str, target: str, flood: int) -> None:
    parsed = parse_multiaddr(target)
    ip, port = parsed.host or "", parsed.tcp_port or 0
    liar_ip = "10.78.0.250"  # nobody listens there
    infos = [service(fake_id(0), ip, port, txt_of(swarm, transport, fake_id(0), ip, port)),
             service(fake_id(1), ip, port, txt_of(swarm + "-other", transport, fake_id(1), ip, port)),
             service(fake_id(2), ip, port, txt_of(swarm, "carrier-pigeon", fake_id(2), ip, port)),
             service(fake_id(3), ip, port, txt_of(swarm, transport, fake_id(3), ip, port, version=LAN_VERSION + 1)),
             service(fake_id(4), ip, port, b"".join(bytes([200]) + b"x=" + b"y" * 198 for _ in range(8)))]
    infos += [service(fake_id(10 + i), liar_ip, 4001, txt_of(swarm, transport, fake_id(10 + i), liar_ip, 4001))
              for i in range(flood)]
    aiozc = AsyncZeroconf(ip_version=IPVersion.V4Only)
    tasks = await asyncio.gather(*(aiozc.async_register_service(info, cooperating_responders=True) for info in infos))
    await asyncio.gather(*tasks)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await aiozc.async_unregister_all_services()
    await aiozc.async_close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])))
