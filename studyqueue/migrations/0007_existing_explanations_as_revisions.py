"""Every explanation written before revisions existed becomes its question's first revision."""

from django.db import migrations
from django.utils import timezone

BATCH = 2000


def forwards(apps, schema_editor):
    question_model = apps.get_model("studyqueue", "StudyQuestion")
    revision_model = apps.get_model("studyqueue", "ExplanationRevision")
    db = schema_editor.connection.alias
    explained = (
        question_model.objects.using(db)
        .exclude(explanation="")
        .filter(current_revision__isnull=True)
        .order_by("pk")
    )
    last = 0
    while True:
        questions = list(explained.filter(pk__gt=last)[:BATCH])
        if not questions:
            return
        revisions = revision_model.objects.using(db).bulk_create(
            revision_model(
                question_id=q.pk,
                text=q.explanation,
                model=q.explanation_model,
                finish_reason="length" if q.explanation_truncated else "stop",
                flags=["truncated"] if q.explanation_truncated else [],
                created_at=q.explained_at or timezone.now(),
            )
            for q in questions
        )
        for question, revision in zip(questions, revisions, strict=True):
            question.current_revision_id = revision.pk
            question.explanation_flags = revision.flags
        question_model.objects.using(db).bulk_update(
            questions, ["current_revision", "explanation_flags"]
        )
        last = questions[-1].pk


class Migration(migrations.Migration):
    dependencies = [("studyqueue", "0006_explanation_revisions")]

    operations = [migrations.RunPython(forwards, migrations.RunPython.noop)]
