"""API routes of the audit trail (mounted under /api/v1/)."""
from common.api import Router

from audit.api import views

router = Router()
router.register("audit-events", views.AuditEventViewSet, basename="auditevent")
urlpatterns = router.urls
