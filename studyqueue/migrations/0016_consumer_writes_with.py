"""What each consumer writes with (model, prompt version) and its gate's limit: the live
consumers' version is what "outdated" means (issue 20, item 4)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('studyqueue', '0015_gate_limit'),
    ]

    operations = [
        migrations.AddField(
            model_name='queueconsumer',
            name='gate_limit',
            field=models.PositiveIntegerField(blank=True, help_text='Concurrent LLM calls its gate allowed at its last report.', null=True, verbose_name='gate limit'),
        ),
        migrations.AddField(
            model_name='queueconsumer',
            name='model',
            field=models.CharField(blank=True, help_text="LLM_MODEL ('': the server's default).", max_length=200, verbose_name='model'),
        ),
        migrations.AddField(
            model_name='queueconsumer',
            name='prompt_label',
            field=models.CharField(blank=True, max_length=200, verbose_name='prompt label'),
        ),
        migrations.AddField(
            model_name='queueconsumer',
            name='prompt_version',
            field=models.CharField(blank=True, max_length=12, verbose_name='prompt version'),
        ),
    ]
