"""Ports for the servers tests start.

A port found free by binding port 0 comes from the kernel's ephemeral range, the same range
it takes source ports from for outgoing connections: between the check and the server's own
bind, another test process's connection to PostgreSQL or to a test LLM server may take it
("Address already in use"). So test servers listen below that range, where the kernel never
allocates, each test process (pytest-xdist worker) in its own block, and a port is still
checked free before it is handed out.
"""

from __future__ import annotations

import itertools
import os
import socket
from pathlib import Path

BLOCK = 500  # ports per test process
FIRST = 20_000  # below Linux's default ephemeral range (32768-60999)


def _first_ephemeral() -> int:
    path = Path("/proc/sys/net/ipv4/ip_local_port_range")
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def _block() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker.removeprefix("gw")) if worker.removeprefix("gw").isdigit() else 0
    start = FIRST + index * BLOCK
    if start + BLOCK > _first_ephemeral():
        raise RuntimeError(f"no room for test process {worker}'s ports below the ephemeral range")
    return range(start, start + BLOCK)


_next = itertools.cycle(_block())


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening (connections to it are refused) that no
    other test process hands out and the kernel never picks for a connection."""
    for _ in range(BLOCK):
        port = next(_next)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("every port of this test process's block is in use")
