"""Pages of this app."""
from django.urls import path

from enforcers import views

urlpatterns = [
    path("clusters/<int:pk>/enforcement/", views.enforcement, name="cluster-enforcement"),
]
