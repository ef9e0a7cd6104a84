"""Every attempt at a job kept (JobAttempt), written by the queue's transitions and pruned with
its job (issue 20, item 3). Jobs already running when this is applied have no open attempt:
their end closes nothing, and their history starts with their next claim."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('studyqueue', '0016_consumer_writes_with'),
    ]

    operations = [
        migrations.CreateModel(
            name='JobAttempt',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('number', models.PositiveIntegerField(help_text="1, 2, … over the job's whole life, an operator's retries included.", verbose_name='attempt')),
                ('started_at', models.DateTimeField(verbose_name='started')),
                ('ended_at', models.DateTimeField(blank=True, null=True, verbose_name='ended')),
                ('worker_id', models.CharField(blank=True, max_length=200, verbose_name='worker')),
                ('outcome', models.CharField(blank=True, choices=[('completed', 'Completed'), ('retrying', 'Retrying'), ('failed', 'Failed'), ('released', 'Handed back'), ('skipped', 'Skipped'), ('stale', 'Stale')], max_length=9, verbose_name='outcome')),
                ('error_code', models.CharField(blank=True, choices=[('llm_unavailable', 'LLM server unreachable'), ('llm_timeout', 'LLM call timed out'), ('llm_overloaded', 'LLM server overloaded (429/503)'), ('llm_server_error', 'LLM server error (5xx)'), ('llm_rejected', 'LLM server rejected the request (4xx)'), ('llm_bad_response', 'LLM reply could not be parsed'), ('llm_empty', 'LLM reply was empty'), ('question_missing', 'Question no longer exists'), ('question_empty', 'Question has no text'), ('question_invalid', 'Question data is invalid (choices)'), ('question_changed', 'Question changed during the LLM call'), ('stale', 'Worker stopped sending heartbeats'), ('unsupported_kind', 'Kind is reserved, not implemented'), ('unknown_kind', 'Kind is not known to this version'), ('operator_skipped', 'Skipped by an operator'), ('internal', 'Unexpected internal error')], max_length=16, verbose_name='error code')),
                ('error_message', models.TextField(blank=True, verbose_name='error message')),
                ('prompt_tokens', models.PositiveIntegerField(blank=True, null=True, verbose_name='prompt tokens')),
                ('completion_tokens', models.PositiveIntegerField(blank=True, null=True, verbose_name='completion tokens')),
                ('first_token_ms', models.PositiveIntegerField(blank=True, null=True, verbose_name='time to first token (ms)')),
                ('job', models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='attempt_log', to='studyqueue.studyquestionjob', verbose_name='job')),
            ],
            options={
                'verbose_name': 'job attempt',
                'verbose_name_plural': 'job attempts',
                'ordering': ['job', 'number'],
                'default_permissions': (),
                'constraints': [models.UniqueConstraint(fields=('job', 'number'), name='studyqueue_attempt_number'), models.UniqueConstraint(condition=models.Q(('ended_at__isnull', True)), fields=('job',), name='studyqueue_attempt_one_open'), models.CheckConstraint(condition=models.Q(('outcome__in', ['', 'completed', 'retrying', 'failed', 'released', 'skipped', 'stale'])), name='studyqueue_attempt_outcome_valid')],
            },
        ),
    ]
