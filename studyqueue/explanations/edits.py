"""A change of what a question's prompt is built from (text, choices, key): every path that
changes it does so inside ``editing``, which says what the change means in the same
transaction (reviews void, the key audit cleared, a waiting explanation audited again)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction

from studyqueue.explanations import key_audit, next_step, revisions
from studyqueue.models import StudyQuestion
from studyqueue.queue.operations import batches

Content = tuple[str, Any, str]


@dataclass
class Edited:
    """What an edit meant, filled in when ``editing``'s block ends."""

    changed: list[int] = field(default_factory=list)
    voided: int = 0
    audits: int = 0


@contextmanager
def editing(question_ids: Iterable[int], *, using: str | None = None) -> Iterator[Edited]:
    """Change the questions' content inside this block; leaving it acts on what changed."""
    ids = sorted({int(pk) for pk in question_ids})
    db = using or StudyQuestion.objects.all().db
    edited = Edited()
    with transaction.atomic(using=db):
        # Locked: the content compared is the content replaced.
        before = _contents(ids, db, lock=True)
        yield edited
        after = _contents(ids, db)
        changed = [pk for pk, content in before.items() if after.get(pk, content) != content]
        if changed:
            key_changed = [pk for pk in changed if after[pk][2] != before[pk][2]]
            edited.changed = changed
            edited.voided = revisions.content_changed(changed, using=db)
            key_audit.content_changed(changed, key_changed, using=db)
            edited.audits = next_step.audit_waiting(changed)


def _contents(ids: list[int], db: str, *, lock: bool = False) -> dict[int, Content]:
    base = StudyQuestion.objects.using(db).order_by("pk")  # one lock order
    if lock:
        base = base.select_for_update()
    found: dict[int, Content] = {}
    for chunk in batches(ids, db):
        rows = base.filter(pk__in=chunk).values_list("pk", "text", "choices", "answer")
        found.update((pk, (text, choices, answer)) for pk, text, choices, answer in rows)
    return found
