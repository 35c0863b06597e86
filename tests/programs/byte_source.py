"""Sends 200,000 bytes to TCP port 4300 of the address argv[1]. Run inside a network namespace
by tests/test_swarm_scale.py.
"""

import socket
import sys

socket.create_connection((sys.argv[1], 4300), timeout=10).sendall(b"x" * 200_000)
