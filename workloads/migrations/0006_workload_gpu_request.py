from django.db import migrations, models


class Migration(migrations.Migration):
    """What one pod of a workload asks of GPUs (whole GPUs, a MIG profile's slices, a KAI fraction): the sync
    writes it from the Job's pod template; the start estimates judge the nodes by it."""

    dependencies = [
        ('workloads', '0005_workload_run_times'),
    ]

    operations = [
        migrations.AddField(
            model_name='workload',
            name='gpu_request',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
