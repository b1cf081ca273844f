"""The ledger measures over-quota against the deserved quota of the time: it records a project's deserved
GPUs whenever its quota row is saved (quota writes go through `projects.services.quota_update`)."""
from __future__ import annotations

from django.db.models.signals import post_save, pre_save
from django.dispatch import receiver

from ledger.services import deserved_history_record
from projects.models import Quota


@receiver(pre_save, sender=Quota, dispatch_uid="ledger-deserved-before")
def _deserved_before(sender, instance: Quota, **kwargs) -> None:
    if instance.pk is not None and instance.project_id is not None:
        instance._ledger_previous = Quota.objects.filter(pk=instance.pk).values_list("gpu_deserved", flat=True).first()


@receiver(post_save, sender=Quota, dispatch_uid="ledger-deserved-after")
def _deserved_after(sender, instance: Quota, raw: bool = False, **kwargs) -> None:
    if raw or instance.project_id is None:
        return
    deserved_history_record(quota=instance, previous=getattr(instance, "_ledger_previous", None))
