"""The job path's module count: how many ``studyqueue`` modules run code, in any thread, for
one completed explanation job (one consumer cycle against the test LLM server), beside the
count for a cycle that drains an empty queue. A ratchet: a change that spreads the job's
path over more modules fails here; one that folds it into fewer lowers ``TODAY``."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import pytest

from studyqueue.consumer.consumer import Consumer
from studyqueue.queue.enqueue import enqueue
from tests.factories import StudyQuestionFactory
from tests.llm_server import LLMServer

pytestmark = pytest.mark.django_db(transaction=True)

# Today's count of modules on a completed job's cycle: lower TODAY as modules fold together,
# never raise it without a reason the review accepts. 14 was met; the endpoint pool
# (services.pool: which of several servers a call goes to) is a concept of its own, beside the
# gate (how many calls one server takes), and made it 15; a cycle that finished a job looks
# for the question sets it completed, to queue their notice (sets.notices): 16.
# The state machine's hub was cut by concept: the attempt log (queue.attempts) and pauses
# (queue.pauses) are modules of their own beside it: 18. The models package counts as one
# (Django's own place, cut by table). The LLM client's module outgrew the house's size for one
# module: what a call returns and how a reply is read (services.replies) left it: 19. The
# answer reader reads Korean as words, through the morphological analyser's module
# (explanations.words, shared with the hider and the summary's reader): 20. The queue's raw
# statements moved to one module (queue.sql: the claim assembled from the kinds' waits, the
# fence, the attempt log's statements, the claim prepared once per session): 21.
TODAY = 21
TARGET = 20
# Not on a job's path as the consumer runs it: the commands that start it, the admin, the
# schema's history.
EXCLUDED = ("studyqueue.management", "studyqueue.admin", "studyqueue.migrations")


class ModuleRecorder:
    """The ``studyqueue`` modules whose functions are called (imports aside), in every
    thread, while a phase is open (``record()``). The profile hook is set on this thread
    and on every thread started meanwhile (``threading.setprofile``): make the consumer
    inside ``active()``, so that its executors' threads, started lazily, are seen."""

    def __init__(self) -> None:
        self._current: set[str] | None = None
        self._lock = threading.Lock()

    def _profile(self, frame: FrameType, event: str, arg: Any) -> None:
        # A module's own body runs once, on its import: whether a job imports one depends on
        # what ran before it in the process (Django loads the format modules on first use).
        if event != "call" or self._current is None or frame.f_code.co_name == "<module>":
            return
        name = frame.f_globals.get("__name__", "")
        if name.startswith("studyqueue.models."):
            name = "studyqueue.models"
        if name.startswith("studyqueue") and not name.startswith(EXCLUDED):
            with self._lock:
                if self._current is not None:
                    self._current.add(name)

    @contextmanager
    def active(self) -> Iterator[ModuleRecorder]:
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        try:
            yield self
        finally:
            sys.setprofile(None)
            threading.setprofile(None)
            self._current = None  # threads still profiled record nothing more

    @contextmanager
    def record(self) -> Iterator[set[str]]:
        modules: set[str] = set()
        self._current = modules
        try:
            yield modules
        finally:
            self._current = None


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


def test_a_completed_job_runs_code_in_at_most_todays_number_of_modules(
    quiet_settings: None, make_consumer: Callable[..., Consumer]
) -> None:
    recorder = ModuleRecorder()
    with recorder.active():
        consumer = make_consumer()
        with recorder.record() as drain:
            assert consumer.run_cycle().outcomes == {}
        enqueue(StudyQuestionFactory(text="What is 2 + 2?", choices=["3", "4"], answer="4"))
        with recorder.record() as job:
            assert consumer.run_cycle().outcomes == {"completed": 1}
    listed = "\n  ".join(sorted(job))
    message = (
        f"{len(job)} modules ran for one completed job (today {TODAY}, target {TARGET}; "
        f"an empty drain runs {len(drain)}):\n  {listed}"
    )
    print(message, "\nthe empty drain:\n  " + "\n  ".join(sorted(drain)))
    assert len(job) <= TODAY, message
