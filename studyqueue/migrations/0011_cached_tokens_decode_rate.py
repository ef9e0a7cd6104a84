"""Measure the prompt cache and correct tokens per second (issue 18, items 2 and 6).

- ``ExplanationRevision.cached_tokens``: the prompt tokens the server served from its cache
  (``usage.prompt_tokens_details.cached_tokens``); null for every earlier reply (unknown).
- ``tokens_per_second`` becomes the decode rate: ``(completion_tokens - 1)`` over the time
  from the first token to the last, null for fewer than two tokens or a span under 50 ms.
  It used to be ``completion_tokens`` over the time after the first token, so that a short
  reply whose tokens came in one or two reads recorded thousands of tokens per second.

Stored values are recomputed from what is stored: the old rate was ``n / span`` with the
span in whole milliseconds, so ``span = n / old`` gives the span back and the new rate is
``(n - 1) / span`` when ``n >= 2`` and ``span >= 50 ms``, else null. A rate without a
completion count (or not a positive finite number) cannot be checked and becomes null.
The old span ran to the end of the stream (the finish and usage chunks after the last
token): on a local server a fraction of a millisecond more. The reverse step keeps the
corrected values (the field stays; the old ones are not worth restoring).
"""

import math

from django.db import migrations, models

BATCH = 2000
MIN_DECODE_SPAN_MS = 50  # as studyqueue.services.llm_reply at 0011


def corrected_rate(completion_tokens, old_rate):
    """The decode rate of a reply stored with the old ``tokens_per_second``."""
    if completion_tokens is None or old_rate is None:
        return None
    if not math.isfinite(old_rate) or old_rate <= 0 or completion_tokens < 2:
        return None
    span_ms = completion_tokens * 1000 / old_rate
    if span_ms < MIN_DECODE_SPAN_MS:
        return None
    return round((completion_tokens - 1) * 1000 / span_ms, 2)


def correct_rates(apps, schema_editor):
    revisions = (
        apps.get_model("studyqueue", "ExplanationRevision")
        .objects.using(schema_editor.connection.alias)
        .filter(tokens_per_second__isnull=False)
        .only("pk", "completion_tokens", "tokens_per_second")
        .order_by("pk")
    )
    last = 0
    while True:
        rows = list(revisions.filter(pk__gt=last)[:BATCH])
        if not rows:
            return
        last = rows[-1].pk
        changed = []
        for row in rows:
            rate = corrected_rate(row.completion_tokens, row.tokens_per_second)
            if rate != row.tokens_per_second:
                row.tokens_per_second = rate
                changed.append(row)
        if changed:
            revisions.model.objects.using(schema_editor.connection.alias).bulk_update(
                changed, ["tokens_per_second"]
            )


class Migration(migrations.Migration):
    dependencies = [
        ("studyqueue", "0010_reply_metadata_on_the_revision"),
    ]

    operations = [
        migrations.AddField(
            model_name="explanationrevision",
            name="cached_tokens",
            field=models.PositiveIntegerField(
                blank=True,
                help_text="Prompt tokens the server served from its cache (blank: it did not say).",
                null=True,
            ),
        ),
        migrations.AlterField(
            model_name="explanationrevision",
            name="tokens_per_second",
            field=models.FloatField(
                blank=True,
                help_text=(
                    "Decode rate: tokens after the first over the time from the first to the "
                    "last (blank: fewer than two tokens or under 50 ms)."
                ),
                null=True,
            ),
        ),
        migrations.RunPython(correct_rates, migrations.RunPython.noop, elidable=True),
    ]
