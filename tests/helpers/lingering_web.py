"""For the serve test (with ``tests.helpers.lingering_settings``): the project's WSGI
application, whose gunicorn worker leaves a process behind that holds the listening socket
after the worker and the master are gone, as a worker the master SIGKILLed and did not wait
for does. The process writes its pid to $STUDYQUEUE_TEST_LINGER_PIDFILE (the test kills it
at its end) and exits by itself after ``LINGER_SECONDS``."""

from __future__ import annotations

import os
import time
from pathlib import Path

from django.core.wsgi import get_wsgi_application

LINGER_SECONDS = 60

application = get_wsgi_application()

if os.fork() == 0:  # in gunicorn's worker, at its start: the child keeps the worker's fds
    try:
        # Not serve's output pipes: the test reads those to their end.
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        path = Path(os.environ["STUDYQUEUE_TEST_LINGER_PIDFILE"])
        path.with_suffix(".tmp").write_text(str(os.getpid()))
        path.with_suffix(".tmp").rename(path)  # whole, or not at all
        time.sleep(LINGER_SECONDS)  # holding the port is its whole job
    finally:
        os._exit(0)
