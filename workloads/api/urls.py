"""API routes of platforms, pod templates, rule sets and workloads (mounted under /api/v1/ by console/api_urls.py)."""
from common.api import Router

from workloads.api import views

router = Router()
router.register("platforms", views.PlatformViewSet, basename="platform")
router.register("pod-templates", views.PodTemplateViewSet, basename="podtemplate")
router.register("rule-sets", views.RuleSetViewSet, basename="ruleset")
router.register("workloads", views.WorkloadViewSet, basename="workload")
urlpatterns = router.urls
