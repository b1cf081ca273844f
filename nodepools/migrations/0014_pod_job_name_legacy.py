import django.db.models.fields.json
import django.db.models.functions.comparison
from django.db import migrations, models

from nodepools.migrations import _usage_triggers


def triggers_again(apps, schema_editor):
    """SQLite drops and adds a stored generated column by rebuilding the pods table, which drops its
    triggers: the node usage triggers of 0012 are made again (PostgreSQL alters the table in place)."""
    if schema_editor.connection.vendor == "sqlite":
        for sql in _usage_triggers.SQLITE_BACKWARD + _usage_triggers.SQLITE_FORWARD:
            schema_editor.execute(sql)


def job_name(*keys):
    expression = [django.db.models.fields.json.KeyTextTransform(key, "labels") for key in keys]
    return models.GeneratedField(
        db_persist=True, output_field=models.CharField(max_length=253, null=True),
        expression=django.db.models.functions.comparison.Coalesce(*expression) if len(expression) > 1
        else expression[0])


class Migration(migrations.Migration):
    """The pods' Job name also from the legacy `job-name` label (pods of Kubernetes before 1.27 carry it
    alone), so that every read of a Job's pods is a lookup of the `pod_job` index, none a scan of the
    labels. A generated column cannot be altered: it is dropped and added again. The index holds the pods
    of a Job only: with every pod in it, the planner's statistics count the pods of no Job as one large Job,
    and a lookup by Job name looks like a scan of the table to it."""

    dependencies = [
        ('nodepools', '0013_pod_job_name'),
    ]

    operations = [
        # Reversed, the rebuilds below run after this: the triggers are made again last.
        migrations.RunPython(migrations.RunPython.noop, triggers_again),
        migrations.RemoveIndex(model_name='pod', name='pod_job'),
        migrations.RemoveField(model_name='pod', name='job_name'),
        migrations.AddField(model_name='pod', name='job_name',
                            field=job_name('batch.kubernetes.io/job-name', 'job-name')),
        migrations.AddIndex(model_name='pod',
                            index=models.Index(fields=['cluster', 'namespace', 'job_name', 'name'], name='pod_job',
                                               condition=models.Q(job_name__isnull=False))),
        migrations.RunPython(triggers_again, migrations.RunPython.noop),
    ]
