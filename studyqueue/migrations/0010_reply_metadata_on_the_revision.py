"""A reply's metadata has one home, its revision (issue 17).

- A job points at the revision that completed it (``revision``) and keeps only what is its
  own: ``llm_ms``, ``max_tokens``, ``quality_retried``. Its copies of the reply's model,
  tokens, timings and prompt version go.
- A question keeps its current text and what its admin filters read (prompt version, flags);
  its copies of the model, the truncation and the time go (read from ``current_revision``).
- ``QueueConsumer.paused_kinds``, comma-joined text ("all" for every kind), becomes a JSON
  list of ``QueuePause.kind`` values ("" for every kind).

The data steps carry every row: an explained question without a revision gets one (as 0007
made them); a completed job points at the newest revision it wrote; a completed job from
before revisions existed adopts the revision 0007 made of its reply when its question still
shows it, lending it the job's tokens and timings. Reversible.
"""

import json

import django.db.models.deletion
from django.db import migrations, models
from django.db.models import Max
from django.utils import timezone

BATCH = 2000
REPLY_FIELDS = {  # on the job at 0009 -> on the revision
    "llm_model": "model",
    "prompt_version": "prompt_version",
    "llm_prompt_tokens": "prompt_tokens",
    "llm_completion_tokens": "completion_tokens",
    "llm_first_token_ms": "first_token_ms",
    "llm_tokens_per_second": "tokens_per_second",
}
# What a job lends the revision 0007 made of its reply: not the prompt version, which the
# question's filter column holds as the revision's (and which jobs before 0006 never had).
LENT_FIELDS = {k: v for k, v in REPLY_FIELDS.items() if k != "prompt_version"}


def _batches(queryset, size=BATCH):
    """Rows of ``queryset`` in pk order, ``size`` at a time."""
    last = 0
    while True:
        rows = list(queryset.filter(pk__gt=last).order_by("pk")[:size])
        if not rows:
            return
        yield rows
        last = rows[-1].pk


# --------------------------------------------------------------------------- paused kinds


def paused_to_json(apps, schema_editor):
    consumers = apps.get_model("studyqueue", "QueueConsumer").objects.using(
        schema_editor.connection.alias
    )
    for row in consumers.only("pk", "paused_kinds"):
        kinds = [k.strip() for k in row.paused_kinds.split(",") if k.strip()]
        value = json.dumps(["" if k == "all" else k for k in kinds])
        consumers.filter(pk=row.pk).update(paused_kinds=value)


def paused_to_text(apps, schema_editor):
    consumers = apps.get_model("studyqueue", "QueueConsumer").objects.using(
        schema_editor.connection.alias
    )
    for row in consumers.only("pk", "paused_kinds"):
        try:
            kinds = json.loads(row.paused_kinds or "[]")
        except ValueError:
            continue  # already text
        text = ",".join(k or "all" for k in kinds)[:200]
        consumers.filter(pk=row.pk).update(paused_kinds=text)


# --------------------------------------------------------------------------- reply metadata


def _revise_unrevised_questions(apps, db):
    """Explained questions without a current revision (raw SQL, older code) get one."""
    question_model = apps.get_model("studyqueue", "StudyQuestion")
    revision_model = apps.get_model("studyqueue", "ExplanationRevision")
    explained = (
        question_model.objects.using(db)
        .exclude(explanation="")
        .filter(current_revision__isnull=True)
    )
    for questions in _batches(explained):
        revisions = revision_model.objects.using(db).bulk_create(
            revision_model(
                question_id=q.pk,
                text=q.explanation,
                model=q.explanation_model,
                prompt_version=q.explanation_prompt_version,
                finish_reason="length" if q.explanation_truncated else "stop",
                flags=q.explanation_flags,
                created_at=q.explained_at or timezone.now(),
            )
            for q in questions
        )
        for question, revision in zip(questions, revisions, strict=True):
            question.current_revision_id = revision.pk
        question_model.objects.using(db).bulk_update(questions, ["current_revision"])


def _point_jobs_at_their_revisions(apps, db):
    """A completed job's reply is the newest revision it wrote (one per quality retry)."""
    job_model = apps.get_model("studyqueue", "StudyQuestionJob")
    revision_model = apps.get_model("studyqueue", "ExplanationRevision")
    completed = job_model.objects.using(db).filter(status="completed").only("pk")
    for jobs in _batches(completed):
        newest = dict(
            revision_model.objects.using(db)
            .filter(job_id__in=[j.pk for j in jobs])
            .values("job_id")
            .annotate(newest=Max("pk"))
            .values_list("job_id", "newest")
        )
        for job in jobs:
            job.revision_id = newest.get(job.pk)
        job_model.objects.using(db).bulk_update(
            [j for j in jobs if j.revision_id is not None], ["revision"]
        )


def _adopt_revisions_made_from_questions(apps, db):
    """A completed job from before revisions existed (0006) wrote no revision; 0007 made one
    of its reply from the question. The newest such job of a question that still shows that
    revision adopts it and lends it what the question did not have (tokens, timings)."""
    job_model = apps.get_model("studyqueue", "StudyQuestionJob")
    revision_model = apps.get_model("studyqueue", "ExplanationRevision")
    question_model = apps.get_model("studyqueue", "StudyQuestion")
    orphans = job_model.objects.using(db).filter(
        status="completed", revision__isnull=True, study_question__isnull=False
    )
    adopted: set[int] = set()
    last = None
    while True:
        page = orphans.order_by("-pk")
        if last is not None:
            page = page.filter(pk__lt=last)
        jobs = list(page[:BATCH])
        if not jobs:
            return
        last = jobs[-1].pk
        current = dict(
            question_model.objects.using(db)
            .filter(pk__in={j.study_question_id for j in jobs}, current_revision__isnull=False)
            .values_list("pk", "current_revision_id")
        )
        revisions = revision_model.objects.using(db).in_bulk(
            [r for r in current.values() if r not in adopted]
        )
        changed_jobs, changed_revisions = [], []
        for job in jobs:  # newest first: the newest job wrote what the question shows
            revision = revisions.get(current.get(job.study_question_id))
            if revision is None or revision.pk in adopted or revision.job_id is not None:
                continue
            if revision.model != job.llm_model:
                continue
            adopted.add(revision.pk)
            revision.job_id = job.pk
            for job_field, revision_field in LENT_FIELDS.items():
                if getattr(revision, revision_field) in (None, ""):
                    setattr(revision, revision_field, getattr(job, job_field))
            job.revision_id = revision.pk
            changed_jobs.append(job)
            changed_revisions.append(revision)
        revision_model.objects.using(db).bulk_update(
            changed_revisions, ["job", *LENT_FIELDS.values()]
        )
        job_model.objects.using(db).bulk_update(changed_jobs, ["revision"])


def metadata_to_revisions(apps, schema_editor):
    db = schema_editor.connection.alias
    _revise_unrevised_questions(apps, db)
    _point_jobs_at_their_revisions(apps, db)
    _adopt_revisions_made_from_questions(apps, db)


def metadata_back_to_copies(apps, schema_editor):
    """Backwards: the job's and the question's copies filled again from the revisions."""
    db = schema_editor.connection.alias
    job_model = apps.get_model("studyqueue", "StudyQuestionJob")
    question_model = apps.get_model("studyqueue", "StudyQuestion")
    revision_model = apps.get_model("studyqueue", "ExplanationRevision")
    for jobs in _batches(job_model.objects.using(db).filter(revision__isnull=False)):
        revisions = revision_model.objects.using(db).in_bulk([j.revision_id for j in jobs])
        for job in jobs:
            revision = revisions[job.revision_id]
            for job_field, revision_field in REPLY_FIELDS.items():
                value = getattr(revision, revision_field)
                setattr(
                    job,
                    job_field,
                    "" if value is None and job_field in {"llm_model", "prompt_version"} else value,
                )
        job_model.objects.using(db).bulk_update(jobs, list(REPLY_FIELDS))
    explained = question_model.objects.using(db).filter(current_revision__isnull=False)
    for questions in _batches(explained):
        revisions = revision_model.objects.using(db).in_bulk(
            [q.current_revision_id for q in questions]
        )
        for question in questions:
            revision = revisions[question.current_revision_id]
            question.explanation_model = revision.model
            question.explanation_truncated = revision.finish_reason == "length"
            question.explained_at = revision.created_at
        question_model.objects.using(db).bulk_update(
            questions, ["explanation_model", "explanation_truncated", "explained_at"]
        )


def constraints_now(apps, schema_editor):
    # PostgreSQL refuses to ALTER a table with deferred FK checks pending from the rows
    # updated above ("pending trigger events"): run those checks now.
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute("SET CONSTRAINTS ALL IMMEDIATE")


class Migration(migrations.Migration):
    dependencies = [("studyqueue", "0009_question_changed")]

    operations = [
        migrations.AddField(
            model_name="studyquestionjob",
            name="revision",
            field=models.ForeignKey(
                blank=True,
                help_text="The reply that completed it: model, tokens, timings, prompt version.",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="studyqueue.explanationrevision",
            ),
        ),
        migrations.RunPython(paused_to_json, paused_to_text),
        migrations.AlterField(
            model_name="queueconsumer",
            name="paused_kinds",
            field=models.JSONField(
                blank=True,
                default=list,
                help_text="The kinds paused at its last report, as QueuePause.kind ('': every kind).",
            ),
        ),
        migrations.RunPython(metadata_to_revisions, metadata_back_to_copies),
        migrations.RunPython(constraints_now, constraints_now),
        migrations.RemoveField(model_name="studyquestion", name="explained_at"),
        migrations.RemoveField(model_name="studyquestion", name="explanation_model"),
        migrations.RemoveField(model_name="studyquestion", name="explanation_truncated"),
        migrations.RemoveField(model_name="studyquestionjob", name="llm_completion_tokens"),
        migrations.RemoveField(model_name="studyquestionjob", name="llm_first_token_ms"),
        migrations.RemoveField(model_name="studyquestionjob", name="llm_model"),
        migrations.RemoveField(model_name="studyquestionjob", name="llm_prompt_tokens"),
        migrations.RemoveField(model_name="studyquestionjob", name="llm_tokens_per_second"),
        migrations.RemoveField(model_name="studyquestionjob", name="prompt_version"),
        migrations.AlterField(
            model_name="explanationrevision",
            name="finish_reason",
            field=models.CharField(
                blank=True, help_text="As the server said it (stop, length…).", max_length=20
            ),
        ),
        migrations.AlterField(
            model_name="studyquestion",
            name="current_revision",
            field=models.ForeignKey(
                blank=True,
                help_text="The revision shown as its explanation (its model, tokens, times).",
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="studyqueue.explanationrevision",
            ),
        ),
        migrations.AlterField(
            model_name="studyquestion",
            name="explanation",
            field=models.TextField(blank=True, help_text="The current revision's text."),
        ),
    ]
