"""Pages of the audit trail."""
from django.urls import path

from audit import views

urlpatterns = [
    path("audit/", views.event_list, name="audit-events"),
    path("audit/export.csv", views.event_export, name="audit-export"),
    path("audit/<int:pk>/", views.event_detail, name="audit-event"),
]
