"""Listens on TCP port 4300 of the address argv[1], prints "listening", then the number of bytes
its one connection sent. Run inside a network namespace by tests/test_swarm_scale.py.
"""

import socket
import sys

server = socket.socket()
server.bind((sys.argv[1], 4300))
server.listen()
print("listening", flush=True)
conn, _ = server.accept()
received = 0
while chunk := conn.recv(65536):
    received += len(chunk)
print(received, flush=True)
