import django_tables2 as tables

from usage.models import UsageSnapshot


class UsageSnapshotTable(tables.Table):
    taken = tables.DateTimeColumn(format="Y-m-d H:i", verbose_name="Time (UTC)")
    kind = tables.Column()
    pool = tables.Column(verbose_name="Node pool", accessor="pool__name", default="—")
    department = tables.Column(accessor="department__name", default="—")
    project = tables.Column(accessor="project__name", default="—")
    gpu_capacity = tables.Column(verbose_name="GPU capacity", default="—", attrs={"td": {"class": "num"}})
    gpu_deserved = tables.Column(verbose_name="GPU deserved", attrs={"td": {"class": "num"}})
    gpu_allocated = tables.Column(verbose_name="GPU allocated", attrs={"td": {"class": "num"}})
    gpu_over_quota = tables.Column(verbose_name="GPU over-quota", attrs={"td": {"class": "num"}})
    cpu_allocated = tables.Column(verbose_name="CPU allocated (cores)", attrs={"td": {"class": "num"}})
    memory_allocated_mib = tables.Column(verbose_name="Memory allocated (MiB)", attrs={"td": {"class": "num"}})

    class Meta:
        model = UsageSnapshot
        fields = ["taken", "kind", "pool", "department", "project", "gpu_capacity", "gpu_deserved", "gpu_allocated",
                  "gpu_over_quota", "cpu_allocated", "memory_allocated_mib"]
        order_by = "-taken"
        attrs = {"class": "data"}
        template_name = "django_tables2/table.html"
