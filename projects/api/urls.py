"""API routes of departments, projects, quotas and role assignments (mounted under /api/v1/)."""
from django.urls import re_path

from common.api import Router
from projects.api import fit, views

router = Router()
router.register("departments", views.DepartmentViewSet, basename="department")
router.register("projects", views.ProjectViewSet, basename="project")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("role-assignments", views.RoleAssignmentViewSet, basename="roleassignment")
ID = r"(?P<pk>[0-9]{1,18})"
urlpatterns = router.urls + [
    re_path(rf"^node-pools/{ID}/fit/?$", fit.PoolFitView.as_view(), name="nodepool-fit"),
    re_path(rf"^clusters/{ID}/fit/?$", fit.ClusterFitView.as_view(), name="cluster-fit"),
]
