"""A real PgBouncer in transaction mode in front of the test database's server, for the
pooler tests: Debian's ``pgbouncer`` package, started in the foreground on a port of this
test process's block, trusting every user (as the server it fronts does), any database
name passed through (the test database included)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from tests.helpers import ports

BINARY = "/usr/sbin/pgbouncer"
START_SECONDS = 15.0


def available() -> bool:
    """Whether PgBouncer is installed (``apt-get install pgbouncer``; ``.ci/run`` does)."""
    return Path(BINARY).exists()


class PgBouncer:
    """One PgBouncer process; ``start()`` returns once it accepts connections."""

    def __init__(self, server_host: str, server_port: int, user: str) -> None:
        self.server_host, self.server_port, self.user = server_host, server_port, user
        self.port = ports.free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="sq-pgbouncer-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, database: str) -> str:
        """A ``DATABASE_URL`` for ``database`` through the pooler."""
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{database}"

    def start(self) -> PgBouncer:
        ini = self.folder / "pgbouncer.ini"
        (self.folder / "users.txt").write_text(f'"{self.user}" ""\n')
        ini.write_text(
            "[databases]\n"
            f"* = host={self.server_host} port={self.server_port}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.folder / 'users.txt'}\n"
            "pool_mode = transaction\n"
            "max_client_conn = 500\n"
            "default_pool_size = 40\n"
            "ignore_startup_parameters = extra_float_digits,options\n"
            f"logfile = {self.folder / 'pgbouncer.log'}\n"
        )
        command = [BINARY, str(ini)]
        if os.geteuid() == 0:  # PgBouncer refuses to run as root
            shutil.chown(self.folder, "postgres")
            for path in self.folder.iterdir():
                shutil.chown(path, "postgres")
            command = ["runuser", "-u", "postgres", "--", *command]
        self.proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    log = self.folder / "pgbouncer.log"
                    text = log.read_text() if log.exists() else ""
                    raise RuntimeError(f"pgbouncer did not start: {text[-2000:]}") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # The whole group: under runuser, PgBouncer is runuser's child.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)
