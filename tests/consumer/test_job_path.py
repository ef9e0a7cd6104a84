"""A job's path: the ``studyqueue`` modules that run code, in any thread, from the claim of one
explanation job (``JobStore.claim``) to its stored result (``JobStore.finish`` returned),
against the test LLM server; and which module calls which on the way. The path crosses at
most ``LIMIT`` modules, and its direct calls (into a module the caller imports) form no
cycle: a module is entered again only through a function it handed over (a callback: the
consumer's pause check, a handler, the gate's lease store, the analyser's matchers)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from graphlib import CycleError, TopologicalSorter
from types import FrameType
from typing import Any

import pytest

from studyqueue.consumer.consumer import Consumer
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory
from tests.llm_server import LLMServer
from tests.test_imports import imports

pytestmark = pytest.mark.django_db(transaction=True)

# The models package counts as one (Django's own place, cut by table).
LIMIT = 16
# Not on a job's path as the consumer runs it: the commands that start it, the admin, the
# schema's history.
EXCLUDED = ("studyqueue.management", "studyqueue.admin", "studyqueue.migrations")
STORE = "studyqueue.queue.store"


def module_of(frame: FrameType | None) -> str:
    """The studyqueue module whose code ``frame`` runs (``""``: none of ours)."""
    name = frame.f_globals.get("__name__", "") if frame is not None else ""
    if name.startswith("studyqueue.models."):
        return "studyqueue.models"
    return name if name.startswith("studyqueue") and not name.startswith(EXCLUDED) else ""


class PathRecorder:
    """Every call into a ``studyqueue`` function (imports aside), in every thread, as
    ``(event, module, function, caller module)`` in the order they happened; the caller is
    the nearest of our modules down the stack (Django calling back into a model is its
    caller's). Make the consumer inside ``active()``, so that its executors' threads, started
    lazily, are seen."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] | None = None
        self._lock = threading.Lock()

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        # A module's own body runs once, on its import: whether a job imports one depends on
        # what ran before it in the process.
        if event not in ("call", "return") or self.events is None:
            return
        if frame.f_code.co_name == "<module>" or not (module := module_of(frame)):
            return
        caller, back = "", frame.f_back
        while back is not None and not (caller := module_of(back)):
            back = back.f_back
        with self._lock:
            if self.events is not None:
                self.events.append((event, module, frame.f_code.co_name, caller))

    @contextmanager
    def active(self) -> Iterator[PathRecorder]:
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            self.events = None  # threads still profiled record nothing more

    def path(self) -> list[tuple[str, str, str, str]]:
        """The calls from the claim's start to the finish's return (a coroutine returns at
        each of its awaits too: the last is its end)."""
        events = self.events or []
        start = events.index(("call", STORE, "claim", "studyqueue.consumer.consumer"))
        end = max(i for i, e in enumerate(events) if e[:3] == ("return", STORE, "finish"))
        return [e for e in events[start : end + 1] if e[0] == "call"]


@pytest.fixture
def quiet_settings(settings: Any, llm_server: LLMServer) -> None:
    """One job, one gate slot; no heartbeat or report comes due mid-cycle."""
    settings.STUDYQUEUE = {
        **settings.STUDYQUEUE,
        "GATE_PERMITS": 1,
        "BATCH_SIZE": 1,
        "HEARTBEAT_SECONDS": 3600,
        "STALE_MINUTES": 240,
        "INTERVAL_SECONDS": 3600,
        "VERIFY": False,  # one explanation job alone (its check is a job of its own)
        "STEP_CHECK": False,
    }


def test_a_job_crosses_few_modules_and_none_twice(
    quiet_settings: None, make_consumer: Callable[..., Consumer]
) -> None:
    recorder = PathRecorder()
    with recorder.active():
        consumer = make_consumer()
        assert consumer.run_cycle().outcomes == {}  # connections and threads made: not the path
        enqueue(StudyQuestionFactory(text="What is 2 + 2?", choices=["3", "4"], answer="4"))
        recorder.events = []
        assert consumer.run_cycle().outcomes == {"completed": 1}
        path = recorder.path()
    modules = sorted({module for _, module, _, _ in path})
    graph = imports()

    def within(name: str, module: str) -> bool:  # the models package is one module here
        return name == module or name.startswith(f"{module}.")

    calls: dict[str, set[str]] = {module: set() for module in modules}
    for _, module, _, caller in path:
        imported = {m for name, found in graph.items() if within(name, caller) for m in found}
        if caller and caller != module and any(within(m, module) for m in imported):
            calls[caller].add(module)
    listed = "\n  ".join(f"{m} -> {', '.join(sorted(calls[m])) or '-'}" for m in modules)
    print(f"{len(modules)} modules on a job's path (at most {LIMIT}):\n  {listed}")
    assert len(modules) <= LIMIT, listed
    try:
        # Each module before those it calls: a cycle is a module visited twice.
        TopologicalSorter(calls).static_order()
    except CycleError as exc:
        raise AssertionError(f"visited twice: {' -> '.join(exc.args[1])}") from None
