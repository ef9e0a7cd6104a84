"""The review queue (issue 19, items 2 and 3): each revision carries a reviewer's decision
(``review_status``: unreviewed, approved, rejected, edited; who and when), who wrote it
(``author``: blank for the LLM; ``based_on``: the revision a reviewer corrected), and whether
it is a ``candidate`` waiting to replace an approved or edited explanation. Every existing
revision starts unreviewed, written by the LLM, not a candidate (database defaults: no rows
are rewritten). The permission ``review_explanation``; the proxy behind the review page."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('studyqueue', '0011_cached_tokens_decode_rate'),
    ]

    operations = [
        migrations.CreateModel(
            name='ExplanationReview',
            fields=[
            ],
            options={
                'verbose_name': 'explanation review',
                'verbose_name_plural': 'explanation reviews',
                'proxy': True,
                'default_permissions': (),
                'indexes': [],
                'constraints': [],
            },
            bases=('studyqueue.explanationrevision',),
        ),
        migrations.AlterModelOptions(
            name='explanationrevision',
            options={'ordering': ['-id'], 'permissions': [('restore_explanationrevision', 'Can make an older revision current'), ('review_explanation', 'Can review explanations (approve, reject, edit)')], 'verbose_name': 'explanation revision'},
        ),
        migrations.AddField(
            model_name='explanationrevision',
            name='author',
            field=models.CharField(blank=True, db_default='', default='', help_text='Who wrote it: blank for the LLM, else the reviewer who corrected it.', max_length=150),
        ),
        migrations.AddField(
            model_name='explanationrevision',
            name='based_on',
            field=models.ForeignKey(blank=True, help_text='The revision a reviewer corrected into this one.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='studyqueue.explanationrevision'),
        ),
        migrations.AddField(
            model_name='explanationrevision',
            name='candidate',
            field=models.BooleanField(db_default=False, default=False, help_text='Written for a question whose explanation was approved or edited: it becomes current only when a reviewer accepts it.'),
        ),
        migrations.AddField(
            model_name='explanationrevision',
            name='review_status',
            field=models.CharField(choices=[('unreviewed', 'unreviewed'), ('approved', 'approved'), ('rejected', 'rejected'), ('edited', 'edited')], db_default='unreviewed', default='unreviewed', max_length=10),
        ),
        migrations.AddField(
            model_name='explanationrevision',
            name='reviewed_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='explanationrevision',
            name='reviewed_by',
            field=models.CharField(blank=True, db_default='', default='', max_length=150),
        ),
        migrations.AddIndex(
            model_name='explanationrevision',
            index=models.Index(condition=models.Q(('candidate', True)), fields=['question'], name='studyqueue_revision_candidate'),
        ),
        migrations.AddConstraint(
            model_name='explanationrevision',
            constraint=models.CheckConstraint(condition=models.Q(('review_status__in', ['unreviewed', 'approved', 'rejected', 'edited'])), name='studyqueue_revision_review_status_valid'),
        ),
    ]
