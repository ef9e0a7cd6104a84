"""What the handlers' tests share: a real webhook receiver."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tests.helpers import ports

SECRET = "s3cret-key"


class Receiver:
    """A webhook receiver on 127.0.0.1: it records each POST and answers with the next of
    ``statuses`` (``otherwise`` once they run out)."""

    def __init__(self) -> None:
        self.posts: list[tuple[dict[str, str], bytes]] = []
        self.statuses: list[int] = []
        self.otherwise = 200
        self.drip = False  # headers, then a byte every ``drip_every`` s of an endless body
        self.drip_every = 0.5
        self.answering = threading.Event()  # cleared: each POST waits (read) until it is set
        self.answering.set()
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with receiver._lock:
                    receiver.posts.append((dict(self.headers), body))
                    status = receiver.statuses.pop(0) if receiver.statuses else receiver.otherwise
                receiver.answering.wait(60)
                if receiver.drip:
                    self._drip()
                    return
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _drip(self) -> None:
                self.send_response(200)
                self.send_header("Content-Length", "100000")
                self.end_headers()
                try:
                    # The receiver's pace, not a synchronisation: it never finishes.
                    while not receiver.stopped.wait(receiver.drip_every):
                        self.wfile.write(b" ")
                        self.wfile.flush()
                except OSError:
                    pass  # the client gave up

        self.httpd = ThreadingHTTPServer(("127.0.0.1", ports.free_port()), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/hooks/studyqueue"

    @contextmanager
    def holding(self, consumer: Any) -> Iterator[None]:
        """For the block, a cycle of ``consumer`` runs in a thread (its own connections) and
        each POST waits for its answer; then the receiver answers and the cycle is joined,
        what it raised raised here."""
        self.answering.clear()
        errors: list[BaseException] = []

        def cycle() -> None:
            try:
                consumer.run_cycle()
            except BaseException as exc:  # reported by the test, not lost in the thread
                errors.append(exc)

        thread = threading.Thread(target=cycle)
        thread.start()
        try:
            yield
        finally:
            self.answering.set()
            thread.join(60)
        assert errors == [] and not thread.is_alive()

    def stop(self) -> None:
        self.stopped.set()
        self.answering.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def receiver(settings, llm_server) -> Iterator[Receiver]:
    hook = Receiver()
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "WEBHOOK_URL": hook.url,
        "WEBHOOK_SECRET": SECRET,
        "KEY_AUDIT": False,
        "VERIFY": False,
        "STEP_CHECK": False,
        "BACKOFF_BASE_SECONDS": 0,
        "BACKOFF_JITTER": 0,
    }
    yield hook
    hook.stop()
