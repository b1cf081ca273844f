"""API routes of usage history (mounted under /api/v1/)."""
from console.api import Router

from usage.api import views

router = Router()
router.register("usage-snapshots", views.UsageSnapshotViewSet, basename="usagesnapshot")
urlpatterns = router.urls
