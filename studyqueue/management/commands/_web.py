"""gunicorn configuration for ``serve``: should ``serve`` die before it can stop gunicorn
(SIGKILL, a crash), gunicorn's master reads the end of a pipe only ``serve`` held open, and
stops itself gracefully."""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

PARENT_PIPE_ENV = "STUDYQUEUE_SERVE_PIPE_FD"


def when_ready(server: Any) -> None:
    """gunicorn hook, in the master once it listens: watch for the end of ``serve``."""
    fd = os.environ.get(PARENT_PIPE_ENV, "")
    if fd.isdecimal():
        threading.Thread(
            target=_stop_when_parent_ends, args=(int(fd),), name="serve-watch", daemon=True
        ).start()


def _stop_when_parent_ends(fd: int) -> None:
    try:
        while os.read(fd, 1):  # serve never writes: b"" (end of file) once it is gone
            pass
    except OSError:
        return  # not the pipe serve passed: nothing to watch
    os.kill(os.getpid(), signal.SIGTERM)
