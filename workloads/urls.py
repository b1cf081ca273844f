"""Pages of this app."""
from django.urls import path

from workloads import views

urlpatterns = [
    path("platforms/", views.platform_list, name="platform-list"),
    path("platforms/<int:pk>/", views.platform_detail, name="platform-detail"),
    path("platforms/<int:pk>/edit/", views.platform_edit, name="platform-edit"),
    path("platforms/<int:pk>/delete/", views.platform_delete, name="platform-delete"),
    path("pools/<int:pk>/platforms/", views.pool_platforms, name="pool-platforms"),
    path("pools/<int:pk>/platforms/add/", views.platform_create, name="platform-create"),
    path("pools/<int:pk>/workload-settings/", views.pool_settings_edit, name="pool-workload-settings"),
    path("pod-templates/", views.pod_template_list, name="podtemplate-list"),
    path("pod-templates/add/", views.pod_template_create, name="podtemplate-create"),
    path("pod-templates/<int:pk>/", views.pod_template_detail, name="podtemplate-detail"),
    path("pod-templates/<int:pk>/edit/", views.pod_template_edit, name="podtemplate-edit"),
    path("pod-templates/<int:pk>/delete/", views.pod_template_delete, name="podtemplate-delete"),
    path("rule-sets/", views.rule_set_list, name="ruleset-list"),
    path("rule-sets/add/", views.rule_set_create, name="ruleset-create"),
    path("rule-sets/<int:pk>/", views.rule_set_detail, name="ruleset-detail"),
    path("rule-sets/<int:pk>/edit/", views.rule_set_edit, name="ruleset-edit"),
    path("rule-sets/<int:pk>/delete/", views.rule_set_delete, name="ruleset-delete"),
    path("workloads/", views.workload_list, name="workload-list"),
    path("workloads/start-estimates/", views.workload_start_estimates, name="workload-start-estimates"),
    path("workloads/submit/", views.workload_submit, name="workload-submit"),
    path("workloads/submit/check/", views.workload_submit_check, name="workload-submit-check"),
    path("workloads/<int:pk>/", views.workload_detail, name="workload-detail"),
    path("workloads/<int:pk>/stop/", views.workload_stop, name="workload-stop"),
    path("pools/<int:pk>/access/", views.pool_access, name="pool-access"),
    path("projects/<int:pk>/start-estimates/", views.project_start_estimates_section, name="project-start-estimates"),
]
