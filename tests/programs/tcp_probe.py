"""Exits 0 when a TCP connection to argv[1]:argv[2] opens within 2 s, else 1. Run inside a
network namespace by tests/natlab.py.
"""

import socket
import sys

probe = socket.socket()
probe.settimeout(2)
sys.exit(0 if probe.connect_ex((sys.argv[1], int(sys.argv[2]))) == 0 else 1)
