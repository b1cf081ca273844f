from django.contrib import admin

from projects.models import Department, PriorityEntry, Project, ProjectNamespace, Quota
from access.models import RoleAssignment


class NamespaceInline(admin.TabularInline):
    model = ProjectNamespace
    extra = 0


@admin.register(Department)
class DepartmentAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "cluster"]
    list_filter = ["cluster"]
    search_fields = ["name", "display_name"]


@admin.register(Project)
class ProjectAdmin(admin.ModelAdmin):
    list_display = ["name", "display_name", "department", "cluster", "allow_over_quota"]
    list_filter = ["cluster", "department"]
    search_fields = ["name", "display_name"]
    inlines = [NamespaceInline]


@admin.register(ProjectNamespace)
class ProjectNamespaceAdmin(admin.ModelAdmin):
    list_display = ["name", "project", "cluster"]
    search_fields = ["name"]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin):
    list_display = ["pool", "department", "project", "gpu_deserved", "gpu_limit", "over_quota_weight", "rank", "version"]
    list_filter = ["pool__cluster", "pool"]
    readonly_fields = ["version"]


@admin.register(PriorityEntry)
class PriorityEntryAdmin(admin.ModelAdmin):
    list_display = ["pool", "project", "department", "position"]


@admin.register(RoleAssignment)
class RoleAssignmentAdmin(admin.ModelAdmin):
    list_display = ["role", "user", "group", "scope_type", "cluster", "department", "project"]
    list_filter = ["role", "scope_type"]
