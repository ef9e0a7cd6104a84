"""Ports for the servers tests start.

A port found free by binding port 0 comes from the kernel's ephemeral range, the same range
it takes source ports from for outgoing connections: between the check and the server's own
bind, another test process's connection to PostgreSQL or to a test LLM server may take it
("Address already in use"). So test servers listen below that range, where the kernel never
allocates, each test process (a pytest-xdist worker, or a whole pytest run) in a block of its
own, held by a file lock for as long as it lives (so two runs at once never share one), and a
port is still checked free before it is handed out.
"""

from __future__ import annotations

import fcntl
import itertools
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

BLOCK = 500  # ports per test process
FIRST = 20_000  # below Linux's default ephemeral range (32768-60999)
LOCKS = Path(tempfile.gettempdir()) / "studyqueue-test-ports"


def _first_ephemeral() -> int:
    path = Path("/proc/sys/net/ipv4/ip_local_port_range")
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


_held: IO[bytes] | None = None  # the lock on this process's block, held until it exits


def _block() -> range:
    """The first block no other test process holds (of any pytest run on this machine): an
    exclusive lock on its file, kept while this process lives."""
    global _held
    LOCKS.mkdir(exist_ok=True)
    for start in range(FIRST, _first_ephemeral() - BLOCK + 1, BLOCK):
        handle = (LOCKS / f"{start}.lock").open("wb")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        _held = handle
        return range(start, start + BLOCK)
    raise RuntimeError("every block of test ports below the ephemeral range is taken")


_ports: Iterator[int] | None = None


def free_port() -> int:
    """A port on 127.0.0.1 with nothing listening (connections to it are refused) that no
    other test process hands out and the kernel never picks for a connection."""
    global _ports
    if _ports is None:
        _ports = itertools.cycle(_block())
    for _ in range(BLOCK):
        port = next(_ports)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("every port of this test process's block is in use")
