"""A real OpenAI-compatible chat server for tests, with fault injection.

It behaves like mlx_lm.server on the wire (see shared/mlx_server.md): HTTP/1.0, one request
per connection, ``{"error": "..."}`` bodies, ``content: null`` for an empty reply, SSE
streams with keep-alive comments, a usage chunk and ``[DONE]``.

Run in a thread (``LLMServer().start()``) or as a process
(``python -m tests.llm_server --port 0``, which prints ``port=N``). Control it through
attributes, or over HTTP: ``POST /_control`` with JSON fields, ``GET /_stats``.

Faults (``fault`` for every request, or ``FAULT:<name>`` inside a question's text):
``500``, ``429`` (with ``Retry-After: retry_after``), ``503``, ``404`` (unknown model),
``400``, ``slow`` (answers after ``slow_seconds``), ``malformed`` (broken JSON),
``null`` (content null), ``length`` (finish_reason "length"), ``drop`` (closes mid-stream).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

QUESTION_RE = re.compile(r"Question:\n(.*?)\n", re.S)
FAULT_RE = re.compile(r"FAULT:([a-z0-9]+)")


class LLMServer:
    """The server and its knobs; thread-safe counters of what it saw."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.delay = 0.0  # seconds per reply
        self.capacity = 0  # replies served at once (0: unlimited); others queue
        self.fault = ""
        self.retry_after = "1"
        self.slow_seconds = 30.0
        self.model_id = "test-model"
        self.answer = "Because 2 + 2 equals 4."
        self.ignore_stream = False  # answer with one JSON body even when asked to stream
        self.last_authorization = ""
        self._lock = threading.Lock()
        self._slots: threading.Semaphore | None = None
        self.requests = 0
        self.active = 0
        self.max_active = 0
        self.per_question: Counter[str] = Counter()
        self.completed_per_question: Counter[str] = Counter()
        self.httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> LLMServer:
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def configure(self, **values: Any) -> None:
        for key, value in values.items():
            if not hasattr(self, key) or key.startswith("_"):
                raise ValueError(f"unknown control {key!r}")
            setattr(self, key, value)
        if "capacity" in values:
            self._slots = threading.Semaphore(self.capacity) if self.capacity else None

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.requests,
                "active": self.active,
                "max_active": self.max_active,
                "per_question": dict(self.per_question),
                "completed_per_question": dict(self.completed_per_question),
            }

    def reset_stats(self) -> None:
        with self._lock:
            self.requests = self.max_active = 0
            self.per_question.clear()
            self.completed_per_question.clear()

    # ------------------------------------------------------------------ handler

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.path == "/_stats":
                    self._json(200, server.stats())
                elif self.path == "/health":
                    self._json(200, {"status": "ok"})
                elif self.path == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": server.model_id}]})
                else:
                    self._text(404, "Not Found")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if self.path == "/_control":
                    try:
                        server.configure(**json.loads(raw or b"{}"))
                    except (ValueError, TypeError) as exc:
                        self._json(400, {"error": str(exc)})
                        return
                    self._json(200, {"ok": True})
                    return
                if self.path == "/_reset":
                    server.reset_stats()
                    self._json(200, {"ok": True})
                    return
                if self.path != "/v1/chat/completions":
                    self._text(404, "Not Found")
                    return
                try:
                    body = json.loads(raw)
                    prompt = body["messages"][-1]["content"]
                except (ValueError, KeyError, IndexError, TypeError):
                    self._json(400, {"error": "malformed request"})
                    return
                server.last_authorization = self.headers.get("Authorization", "")
                server._serve_chat(self, body, prompt)

            def _json(self, status: int, data: Any, headers: dict | None = None) -> None:
                payload = json.dumps(data).encode()
                getattr(self, "finished", lambda: None)()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)

            def _text(self, status: int, text: str) -> None:
                payload = text.encode()
                getattr(self, "finished", lambda: None)()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        return Handler

    def _serve_chat(self, h: Any, body: dict, prompt: str) -> None:
        match = QUESTION_RE.search(prompt)
        question = match.group(1).strip() if match else prompt[:60]
        fault_match = FAULT_RE.search(prompt)
        fault = fault_match.group(1) if fault_match else self.fault
        slots = self._slots
        if slots is not None:
            slots.acquire()
        with self._lock:
            self.requests += 1
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            self.per_question[question] += 1
        open_ = [True]

        def finished() -> None:
            # Called just before the last bytes go out: a client can never see the end
            # of a reply while the server still counts it as active.
            with self._lock:
                if not open_[0]:
                    return
                open_[0] = False
                self.active -= 1
            if slots is not None:
                slots.release()

        h.finished = finished
        try:
            self._reply(h, body, fault)
            with self._lock:
                self.completed_per_question[question] += 1
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away (timeout, shutdown): stop "generating"
        finally:
            finished()

    def _reply(self, h: Any, body: dict, fault: str) -> None:
        if fault in ("500", "503", "400"):
            h._json(int(fault), {"error": f"injected {fault}"})
            return
        if fault == "429":
            h._json(429, {"error": "too many requests"}, {"Retry-After": self.retry_after})
            return
        if fault == "404":
            h._json(404, {"error": f"model {body.get('model')!r} not found"})
            return
        if fault == "slow":
            time.sleep(self.slow_seconds)
        elif self.delay:
            time.sleep(self.delay)
        content: str | None = None if fault == "null" else self.answer
        finish = "length" if fault == "length" else "stop"
        usage = {"prompt_tokens": 42, "completion_tokens": 7, "total_tokens": 49}
        if not body.get("stream") or self.ignore_stream:
            if fault == "malformed":
                h._text(200, '{"choices": [ {"message": ')
                return
            h._json(
                200,
                {
                    "id": "chatcmpl-test",
                    "object": "chat.completion",
                    "model": body.get("model") or "default_model",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": finish,
                        }
                    ],
                    "usage": usage,
                },
            )
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.end_headers()
        model = body.get("model") or "default_model"

        def event(data: Any) -> None:
            h.wfile.write(f"data: {json.dumps(data)}\n\n".encode())
            h.wfile.flush()

        def chunk(delta: dict, finish_reason: str | None = None) -> dict:
            return {
                "object": "chat.completion.chunk",
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            }

        h.wfile.write(b": keepalive 1/2\n\n")
        if fault == "malformed":
            h.finished()
            h.wfile.write(b"data: {not json\n\n")
            return
        words = (content or "").split(" ") if content is not None else []
        if content is None:
            event(chunk({"role": "assistant", "content": None}))
        for i, word in enumerate(words):
            event(chunk({"role": "assistant", "content": word if i == 0 else " " + word}))
            if fault == "drop" and i == 1:
                h.finished()
                h.wfile.flush()
                h.connection.shutdown(2)  # cut the connection mid-reply
                return
        event(chunk({"role": "assistant"}, finish))
        if body.get("stream_options", {}).get("include_usage"):
            event(
                {"object": "chat.completion.chunk", "model": model, "choices": [], "usage": usage}
            )
        h.finished()
        h.wfile.write(b"data: [DONE]\n\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--capacity", type=int, default=0)
    args = parser.parse_args()
    server = LLMServer(port=args.port)
    server.configure(delay=args.delay, capacity=args.capacity)
    print(f"port={server.port}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.httpd.serve_forever()


if __name__ == "__main__":
    main()
