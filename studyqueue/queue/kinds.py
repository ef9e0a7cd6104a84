"""The job kinds' specs: what the queue knows of a kind, declared by the kind's own module
(``studyqueue.workers``) beside its handler with ``register``. The claim and "when is the next
job due" are assembled from the registered waits (``queue.sql``); enqueue reads the priority;
the consumer runs a delivery beside the places it keeps for LLM calls."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Spec:
    """One job kind as the queue sees it."""

    kind: str
    handler: Callable[..., Awaitable[Any]]  # ``(job, ctx) -> JobResult`` (workers.registry)
    # SQL, a condition on ``job`` (the pending job's row; ``%(holds)s`` is KEY_AUDIT_HOLDS):
    # while it holds, the job is not claimed. The only form of the kind's wait.
    wait: str = ""
    # Jobs are claimed by priority, then deadline and age: a higher number waits while any
    # lower one is ready.
    priority: int = 0
    delivery: bool = False  # no LLM call (a notice): runs beside the places kept for LLM jobs


SPECS: dict[str, Spec] = {}


def register(spec: Spec) -> Spec:
    """Make ``spec`` its kind's (the last one registered wins: tests and benches swap one in)."""
    SPECS[spec.kind] = spec
    return spec


def priority(kind: str) -> int:
    """The claim priority of ``kind``'s jobs (0 for a kind no module registered)."""
    spec = SPECS.get(kind)
    return spec.priority if spec is not None else 0


def deliveries() -> frozenset[str]:
    """The kinds that make no LLM call."""
    return frozenset(kind for kind, spec in SPECS.items() if spec.delivery)


def waits() -> tuple[tuple[str, str], ...]:
    """Each kind that waits, with its wait, in a stable order (the claim is assembled from it)."""
    return tuple(sorted((kind, spec.wait) for kind, spec in SPECS.items() if spec.wait))
