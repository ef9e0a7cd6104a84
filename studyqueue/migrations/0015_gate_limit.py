"""The adaptive gate's limit per LLM endpoint, shared by consumers and kept across restarts,
and each consumer's GATE_PERMITS (issue 18, item 3)."""

import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('studyqueue', '0014_review'),
    ]

    operations = [
        migrations.CreateModel(
            name='GateLimit',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('endpoint', models.CharField(help_text='Credentials redacted.', max_length=500, unique=True, verbose_name='endpoint')),
                ('limit', models.PositiveIntegerField(help_text='Concurrent calls allowed now.', verbose_name='limit')),
                ('rates', models.JSONField(blank=True, default=dict, help_text='Completion tokens/s last measured at each limit, as {limit: tokens/s}.', verbose_name='tokens/s by limit')),
                ('reason', models.CharField(blank=True, max_length=20, verbose_name='reason')),
                ('changed_at', models.DateTimeField(default=django.utils.timezone.now, verbose_name='changed at')),
            ],
            options={
                'verbose_name': 'gate limit',
                'verbose_name_plural': 'gate limits',
                'ordering': ['endpoint'],
            },
        ),
        migrations.AddField(
            model_name='queueconsumer',
            name='gate_permits',
            field=models.CharField(blank=True, help_text='GATE_PERMITS as it started: a number, or auto (see GateLimit).', max_length=10, verbose_name='gate permits'),
        ),
    ]
