"""API routes of departments, projects, quotas and role assignments (mounted under /api/v1/)."""
from console.api import Router

from projects.api import views

router = Router()
router.register("departments", views.DepartmentViewSet, basename="department")
router.register("projects", views.ProjectViewSet, basename="project")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("role-assignments", views.RoleAssignmentViewSet, basename="roleassignment")
urlpatterns = router.urls
