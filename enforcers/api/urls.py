"""API routes of enforcement (mounted under /api/v1/)."""
from django.urls import re_path

from enforcers.api import views

ID = r"(?P<pk>[0-9]{1,18})"
urlpatterns = [
    re_path(rf"^clusters/{ID}/enforcement/?$", views.EnforcementView.as_view(), name="cluster-enforcement"),
    re_path(rf"^clusters/{ID}/scheduler-queues/?$", views.SchedulerQueueList.as_view(), name="cluster-scheduler-queues"),
    re_path(rf"^projects/{ID}/waiting/?$", views.ProjectWaitingView.as_view(), name="project-waiting"),
    re_path(rf"^departments/{ID}/waiting/?$", views.DepartmentWaitingView.as_view(), name="department-waiting"),
]
