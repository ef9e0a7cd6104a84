"""The answer a reply states, kept on its revision (issue 19, item 1).

``ExplanationRevision.stated_answer``: what ``studyqueue.answers`` read from the reply, as
written. Earlier revisions keep it blank and keep their flags: they were written by prompts
that did not ask for an answer line, so reading them now would flag most of them.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("studyqueue", "0012_field_labels"),
    ]

    operations = [
        migrations.AddField(
            model_name="explanationrevision",
            name="stated_answer",
            field=models.CharField(
                blank=True,
                db_default="",
                default="",
                help_text="The answer the reply states, as written (blank: none could be read, "
                "or it was written before answers were read).",
                max_length=200,
                verbose_name="stated answer",
            ),
        ),
    ]
