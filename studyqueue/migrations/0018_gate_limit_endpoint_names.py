"""Gate limits named by their server's normalised URL (``services.gate.endpoint_name``): rows
stored under another spelling of the same server (a trailing slash, ``localhost``, the
default port, redacted credentials) are renamed, and two spellings of one server merged
into one row: the limit of the one changed last, the tokens/s of both (the newer wins).

It depends on ``0017_job_attempts``, which 0.2.0 squashed into ``0001_squashed_0017_job_attempts``
(its ``replaces`` holds 0017): Django points this dependency at the squashed migration. On a new
database it finds no rows. ``endpoint_name`` is copied here as it was when this migration was
written, so that it runs whatever becomes of ``studyqueue.services.gate``."""

import re
from urllib.parse import urlsplit, urlunsplit

from django.db import migrations, models

_LOOPBACK_NAMES = {"localhost": "127.0.0.1"}
_DEFAULT_PORTS = {"http": 80, "https": 443}
_USERINFO = re.compile(r"^([a-z][a-z0-9+.-]*://)[^/?#]*@", re.IGNORECASE)


def endpoint_name(url):
    """``studyqueue.services.gate.endpoint_name`` at 0018: one name per server however its URL
    is written (scheme and host lower case, ``localhost`` as ``127.0.0.1``, no default port, no
    trailing slash, credentials, query or fragment)."""
    url = _USERINFO.sub(r"\1", url.strip())
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        return url.rstrip("/")
    if not host:
        return url.rstrip("/")
    scheme = parts.scheme.lower()
    host = _LOOPBACK_NAMES.get(host, host)
    if ":" in host:
        host = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return urlunsplit((scheme, host, parts.path.rstrip("/"), "", ""))


def rename(apps, schema_editor):
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
