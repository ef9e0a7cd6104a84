"""gunicorn configuration for ``serve`` (``-c python:<this module>``): the web server ends
when ``serve`` does, however ``serve`` ends.

``serve`` starts gunicorn in a session of its own, so that a terminal's signals (SIGHUP
when it closes, Ctrl-C) reach ``serve`` alone, which then stops gunicorn with SIGTERM
(gunicorn would take SIGHUP as "reload" and keep serving). Should ``serve`` die without
doing so (SIGKILL, a crash), gunicorn notices here: ``serve`` holds the write end of a pipe
whose read end gunicorn's master inherits; the read returns at the end of file when
``serve`` is gone, and the master stops itself gracefully.
"""

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
        watcher = threading.Thread(
            target=_stop_when_parent_ends, args=(int(fd),), name="serve-watch", daemon=True
        )
        watcher.start()


def _stop_when_parent_ends(fd: int) -> None:
    try:
        while os.read(fd, 1):  # serve never writes: b"" (end of file) once it is gone
            pass
    except OSError:
        return  # not the pipe serve passed: nothing to watch
    os.kill(os.getpid(), signal.SIGTERM)
