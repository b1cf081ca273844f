"""API routes of usage history (mounted under /api/v1/)."""
from django.urls import re_path

from common.api import Router

from usage.api import views

router = Router()
router.register("usage-snapshots", views.UsageSnapshotViewSet, basename="usagesnapshot")
urlpatterns = router.urls + [
    re_path(r"^idle-gpus/?$", views.IdleGpuList.as_view(), name="idle-gpus"),
]
