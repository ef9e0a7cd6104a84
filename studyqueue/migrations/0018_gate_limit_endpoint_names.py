"""Gate limits named by their server's normalised URL (``services.gate.endpoint_name``): rows
stored under another spelling of the same server (a trailing slash, ``localhost``, the
default port, redacted credentials) are renamed, and two spellings of one server merged
into one row: the limit of the one changed last, the tokens/s of both (the newer wins)."""

from django.db import migrations, models


def rename(apps, schema_editor):
    from studyqueue.services.gate import endpoint_name

    gate_limit = apps.get_model("studyqueue", "GateLimit")
    db = schema_editor.connection.alias
    rows = gate_limit.objects.using(db).order_by("changed_at", "pk")
    by_name = {}
    for row in rows:  # oldest first: a newer row's limit and rates win
        by_name.setdefault(endpoint_name(row.endpoint)[:500], []).append(row)
    for name, group in by_name.items():
        keep = group[-1]
        rates = {}
        for row in group:
            if isinstance(row.rates, dict):
                rates.update(row.rates)
        gate_limit.objects.using(db).filter(pk__in=[r.pk for r in group[:-1]]).delete()
        if keep.endpoint != name or keep.rates != rates:
            keep.endpoint, keep.rates = name, rates
            keep.save(update_fields=["endpoint", "rates"])


class Migration(migrations.Migration):

    dependencies = [
        ('studyqueue', '0017_job_attempts'),
    ]

    operations = [
        migrations.AlterField(
            model_name='gatelimit',
            name='endpoint',
            field=models.CharField(help_text="The LLM server's URL, normalised: one row per server however its URL is written, never with credentials.", max_length=500, unique=True, verbose_name='endpoint'),
        ),
        migrations.RunPython(rename, migrations.RunPython.noop, elidable=True),
    ]
