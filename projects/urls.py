"""Pages of this app."""
from django.urls import path

from projects import views

urlpatterns = [
    path("clusters/<int:pk>/", views.cluster_overview, name="cluster-overview"),
    path("pools/<int:pk>/", views.pool_detail, name="pool-detail"),
    path("departments/", views.department_list, name="department-list"),
    path("departments/add/", views.department_create, name="department-create"),
    path("departments/<int:pk>/", views.department_detail, name="department-detail"),
    path("departments/<int:pk>/edit/", views.department_edit, name="department-edit"),
    path("departments/<int:pk>/members/", views.department_members, name="department-members"),
    path("projects/", views.project_list, name="project-list"),
    path("projects/add/", views.project_create, name="project-create"),
    path("projects/mine/", views.my_projects, name="my-projects"),
    path("projects/<int:pk>/", views.project_detail, name="project-detail"),
    path("projects/<int:pk>/edit/", views.project_edit, name="project-edit"),
    path("projects/<int:pk>/members/", views.project_members, name="project-members"),
    path("projects/<int:pk>/priority/", views.project_priority, name="project-priority"),
    path("projects/<int:pk>/utilization/", views.project_utilization, name="project-utilization"),
    path("departments/<int:pk>/utilization/", views.department_utilization, name="department-utilization"),
    path("projects/<int:pk>/utilization-chart/", views.project_utilization_chart, name="project-utilization-chart"),
    path("departments/<int:pk>/utilization-chart/", views.department_utilization_chart,
         name="department-utilization-chart"),
    path("clusters/<int:pk>/quota/", views.quota_grid, name="quota-grid"),
    path("quota/<int:pk>/edit/", views.quota_edit, name="quota-edit"),
]
