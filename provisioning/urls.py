"""Pages of this app."""
from django.urls import path

from provisioning import views

urlpatterns = [
    path("pools/add/karpenter/", views.pool_create, name="provisioning-pool-create"),
    path("pools/<int:pk>/nodepool/", views.nodepool_edit, name="provisioning-nodepool-edit"),
    path("pools/<int:pk>/delete/karpenter/", views.pool_delete, name="provisioning-pool-delete"),
]
