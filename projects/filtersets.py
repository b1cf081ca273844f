"""One FilterSet per model of the organisation (see nodepools/filtersets.py)."""
from __future__ import annotations

import django_filters
from django.db.models import Q

from nodepools.filtersets import ModelMultipleChoiceFilter, SearchMixin, visible_clusters, visible_pools
from access.rules import Role, ScopeType
from projects.models import Department, Project, Quota
from access.models import RoleAssignment


def visible_departments(request):
    return Department.objects.restrict(getattr(request, "user", None), "view")


def visible_projects(request):
    return Project.objects.restrict(getattr(request, "user", None), "view")


class DepartmentFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "display_name", "description")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters)

    class Meta:
        model = Department
        fields = ["q", "cluster"]


class ProjectFilterSet(SearchMixin, django_filters.FilterSet):
    search_fields = ("name", "display_name", "description", "namespaces__name")
    q = django_filters.CharFilter(method="search", label="Search")
    cluster = ModelMultipleChoiceFilter(queryset=visible_clusters)
    department = ModelMultipleChoiceFilter(queryset=visible_departments)

    class Meta:
        model = Project
        fields = ["q", "cluster", "department"]

    def search(self, queryset, name, value):
        return super().search(queryset, name, value).distinct()


class QuotaFilterSet(django_filters.FilterSet):
    cluster = ModelMultipleChoiceFilter(field_name="pool__cluster", queryset=visible_clusters)
    pool = ModelMultipleChoiceFilter(queryset=visible_pools, label="Node pool")
    department = ModelMultipleChoiceFilter(
        queryset=visible_departments, method="filter_department", label="Department (and its projects)"
    )
    project = ModelMultipleChoiceFilter(queryset=visible_projects)
    owner = django_filters.ChoiceFilter(choices=[("department", "Departments"), ("project", "Projects")],
                                        method="filter_owner")

    class Meta:
        model = Quota
        fields = ["cluster", "pool", "department", "project", "owner"]

    def filter_department(self, queryset, name, value):
        if not value:
            return queryset
        return queryset.filter(Q(department__in=value) | Q(project__department__in=value))

    def filter_owner(self, queryset, name, value):
        if value == "department":
            return queryset.filter(project__isnull=True)
        if value == "project":
            return queryset.filter(project__isnull=False)
        return queryset


class RoleAssignmentFilterSet(django_filters.FilterSet):
    role = django_filters.MultipleChoiceFilter(choices=Role.choices)
    scope_type = django_filters.MultipleChoiceFilter(choices=ScopeType.choices)
    department = ModelMultipleChoiceFilter(queryset=visible_departments)
    project = ModelMultipleChoiceFilter(queryset=visible_projects)
    username = django_filters.CharFilter(field_name="user__username", lookup_expr="icontains")

    class Meta:
        model = RoleAssignment
        fields = ["role", "scope_type", "department", "project", "username"]
