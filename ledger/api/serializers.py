from decimal import Decimal

from rest_framework import serializers

from common.fields import StrictDateField, StrictDecimalField, StrictIntegerField
from common.api import ModelSerializer, RestrictedPrimaryKeyRelatedField
from ledger.models import LedgerEntry, Rate
from ledger.selectors import TEN_THOUSANDTH, gib_hours, hours
from nodepools.models import NodePool



class LedgerEntrySerializer(ModelSerializer):
    kind = serializers.CharField(source="get_kind_display", read_only=True, help_text="Hour closed, or Correction "
                                 "(the difference a late event made to a closed hour, recorded when it came).")
    gpu_hours = serializers.SerializerMethodField(help_text="GPU-hours held (to 1/10,000 of an hour; exact: gpu_seconds).")
    over_quota_gpu_hours = serializers.SerializerMethodField()
    non_preemptible_gpu_hours = serializers.SerializerMethodField()
    idle_gpu_hours = serializers.SerializerMethodField()
    gpu_utilization = StrictDecimalField(max_digits=5, decimal_places=1, read_only=True, allow_null=True,
                                               help_text="Average utilization (%) of the GPUs held; null: not reported.")
    cpu_core_hours = serializers.SerializerMethodField()
    memory_gib_hours = serializers.SerializerMethodField()

    class Meta:
        model = LedgerEntry
        fields = ["id", "hour", "kind", "recorded", "cluster_id", "pool", "gpu_model", "gpu_unit", "department",
                  "project", "gpu_hours", "over_quota_gpu_hours", "non_preemptible_gpu_hours", "idle_gpu_hours",
                  "gpu_utilization", "cpu_core_hours", "memory_gib_hours", "gpu_seconds", "over_quota_gpu_seconds",
                  "non_preemptible_gpu_seconds", "idle_gpu_seconds", "unit_seconds", "measured_gpu_seconds", "busy_gpu_seconds",
                  "cpu_core_seconds", "memory_byte_seconds"]
        read_only_fields = fields

    def _hours(self, value) -> Decimal:
        return hours(value, TEN_THOUSANDTH)

    def get_gpu_hours(self, obj) -> Decimal:
        return self._hours(obj.gpu_seconds)

    def get_over_quota_gpu_hours(self, obj) -> Decimal:
        return self._hours(obj.over_quota_gpu_seconds)

    def get_non_preemptible_gpu_hours(self, obj) -> Decimal:
        return self._hours(obj.non_preemptible_gpu_seconds)

    def get_idle_gpu_hours(self, obj) -> Decimal:
        return self._hours(obj.idle_gpu_seconds)

    def get_cpu_core_hours(self, obj) -> Decimal:
        return self._hours(obj.cpu_core_seconds)

    def get_memory_gib_hours(self, obj) -> Decimal:
        return gib_hours(obj.memory_byte_seconds, TEN_THOUSANDTH)


class StatementFiguresSerializer(serializers.Serializer):
    gpu_hours = StrictDecimalField(max_digits=20, decimal_places=2)
    over_quota_hours = StrictDecimalField(max_digits=20, decimal_places=2)
    non_preemptible_hours = StrictDecimalField(max_digits=20, decimal_places=2)
    idle_hours = StrictDecimalField(max_digits=20, decimal_places=2, allow_null=True,
                                    help_text="null: not measured (Prometheus said the idle share of none of the "
                                              "GPU-time; a total: of none of the lines). A total: of the measured lines.")
    correction_hours = StrictDecimalField(max_digits=20, decimal_places=2,
                                                help_text="Included in gpu_hours: late events that changed closed hours.")
    gpu_utilization = StrictDecimalField(max_digits=5, decimal_places=1, allow_null=True,
                                         help_text="An average, not a sum: Σ busy ÷ Σ measured GPU-seconds, the "
                                                   "utilization weighted by GPU-hours (of the measured GPU-time); "
                                                   "null: not measured.")
    cpu_core_hours = StrictDecimalField(max_digits=20, decimal_places=2)
    memory_gib_hours = StrictDecimalField(max_digits=20, decimal_places=2)
    cost = StrictDecimalField(max_digits=20, decimal_places=2)
    idle_cost = StrictDecimalField(max_digits=20, decimal_places=2, allow_null=True,
                                   help_text="null: idle not measured (as idle_hours).")
    unpriced_hours = StrictDecimalField(max_digits=20, decimal_places=2,
                                              help_text="GPU-hours of GPU models without a rate for their day (not in cost).")


class StatementLineSerializer(StatementFiguresSerializer):
    department = serializers.CharField(source="labels.department", required=False)
    department_id = StrictIntegerField(source="ids.department", required=False, allow_null=True)
    project = serializers.CharField(source="labels.project", required=False)
    project_id = StrictIntegerField(source="ids.project", required=False, allow_null=True)
    pool = serializers.CharField(source="labels.pool", required=False)
    pool_id = StrictIntegerField(source="ids.pool", required=False, allow_null=True)
    gpu_model = serializers.CharField(source="labels.gpu_model", required=False)
    gpu_seconds = StrictDecimalField(source="exact.gpu_seconds", max_digits=24, decimal_places=3,
                                           help_text="Exact: Σ GPUs × seconds.")
    unit = serializers.CharField(required=False, allow_null=True,
                                 help_text="What the line's GPUs are billed in: \"\" whole GPUs, a MIG profile (1g.10gb: "
                                           "slices), replica:<n> (replicas of a GPU time-sliced n ways), fraction "
                                           "(GPU-equivalents). Lines of a department's statement only.")
    unit_label = serializers.CharField(required=False, help_text="The unit as the page names it.")
    quantity = StrictDecimalField(max_digits=20, decimal_places=2, required=False, allow_null=True,
                                  help_text="Hours of the unit: GPU-hours, slice-hours, replica-hours.")
    quantity_unit = serializers.CharField(source="quantity_label", required=False)
    rate = StrictDecimalField(max_digits=20, decimal_places=4, required=False, allow_null=True,
                              help_text="The price per unit-hour (null: none, or several in the month).")
    rate_derived = serializers.BooleanField(required=False, help_text="The price is the GPU model's × the unit's "
                                            "share of a GPU (no rate of the MIG profile's own).")

    def to_representation(self, instance):
        data = super().to_representation(instance)
        for name in ("department", "department_id", "project", "project_id", "pool", "pool_id", "gpu_model"):
            if name.removesuffix("_id") not in instance.labels:
                data.pop(name, None)
        if instance.unit is None:
            for name in ("unit", "unit_label", "quantity", "quantity_unit", "rate", "rate_derived"):
                data.pop(name, None)
        return data


class DayFigureSerializer(serializers.Serializer):
    day = StrictDateField()
    gpu_hours = StrictDecimalField(max_digits=20, decimal_places=2)
    over_quota_hours = StrictDecimalField(max_digits=20, decimal_places=2)
    idle_hours = StrictDecimalField(max_digits=20, decimal_places=2)


class StatementSerializer(serializers.Serializer):
    title = serializers.CharField()
    month = serializers.CharField()
    cluster = serializers.CharField(source="cluster.name")
    department = serializers.CharField(source="department.name", allow_null=True, default=None)
    currency = serializers.CharField(help_text="Of every cost (all rates are in one currency).")
    closed_until = serializers.DateTimeField(allow_null=True, help_text="The ledger's hours are closed until then.")
    number = serializers.CharField(help_text="The statement's number: GPU-<month>-C<cluster id>[-D<department id>]-R<revision>; "
                                             "a month not closed yet: …-PROV (provisional).")
    revision = StrictIntegerField(allow_null=True, help_text="1 when the month closed, one more each time a late "
                                                            "correction changed its figures; null: provisional.")
    provisional = serializers.BooleanField(help_text="The month is not closed yet: its figures may still change.")
    issued_at = serializers.DateTimeField(allow_null=True, help_text="When this revision's figures were fixed (the "
                                                                     "month's close, or the correction); provisional: "
                                                                     "the time its figures were read (as of).")
    idle_not_measured_reason = serializers.CharField(help_text="Why a line's idle figures may be null (not measured).")
    lines = StatementLineSerializer(many=True, help_text="Department: projects × pools × GPU models; cluster: "
                                                        "departments ranked by GPU-hours.")
    totals = StatementFiguresSerializer(help_text="Each total is the sum of the lines' figures, but gpu_utilization "
                                                  "(their average weighted by GPU-hours) and idle_hours / idle_cost "
                                                  "(the sum of the measured lines; null when none is).")
    days = DayFigureSerializer(many=True)


class RateSerializer(ModelSerializer):
    pool = RestrictedPrimaryKeyRelatedField(model=NodePool, required=False, allow_null=True,
                                            help_text="Only this pool (null: every pool).")

    class Meta:
        model = Rate
        fields = ["id", "gpu_model", "mig_profile", "pool", "currency", "valid_from", "gpu_hour", "cpu_core_hour", "memory_gib_hour",
                  "description", "version", "updated"]
        read_only_fields = ["version", "updated"]
        extra_kwargs = {"gpu_hour": {"min_value": 0}, "cpu_core_hour": {"min_value": 0},
                        "memory_gib_hour": {"min_value": 0}, "description": {"max_length": 200}}
        validators = []  # the service checks the rules (one rate per model, pool and date; one currency)


class RateUpdateSerializer(serializers.Serializer):
    gpu_model = serializers.CharField(max_length=128, required=False)
    mig_profile = serializers.CharField(max_length=32, required=False, allow_blank=True)
    pool = RestrictedPrimaryKeyRelatedField(model=NodePool, required=False, allow_null=True)
    currency = serializers.CharField(max_length=3, required=False)
    valid_from = StrictDateField(required=False)
    gpu_hour = StrictDecimalField(max_digits=12, decimal_places=4, min_value=0, required=False)
    cpu_core_hour = StrictDecimalField(max_digits=12, decimal_places=6, min_value=0, required=False, allow_null=True)
    memory_gib_hour = StrictDecimalField(max_digits=12, decimal_places=6, min_value=0, required=False,
                                               allow_null=True)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True)
    version = StrictIntegerField(required=False, min_value=0, max_value=2**31 - 1,
                                       help_text="The version read: a change made meanwhile is refused (409).")
