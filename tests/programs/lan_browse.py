"""``swarmnode doctor``'s LAN check alone, as JSON: ``lan_browse.py SWARM TRANSPORT`` (run it
inside a test's network namespace; the whole doctor would load torch for its device check)."""

from __future__ import annotations

import dataclasses
import json
import sys

from swarmnode.config import NodeConfig
from swarmnode.node.doctor_network import check_lan

if __name__ == "__main__":
    check = check_lan(NodeConfig(swarm=sys.argv[1], transport=sys.argv[2]))
    print(json.dumps(dataclasses.asdict(check)))
