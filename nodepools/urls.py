"""Pages of this app."""
from django.urls import include, path

from nodepools import views

urlpatterns = [
    path("clusters/switch/", views.cluster_switch, name="cluster-switch"),
    path("pools/", views.pool_list, name="pool-list"),
    path("pools/add/", views.pool_create, name="pool-create"),
    path("pools/<int:pk>/edit/", views.pool_edit, name="pool-edit"),
    path("pools/<int:pk>/delete/", views.pool_delete, name="pool-delete"),
    path("pools/<int:pk>/gpu-shape/", views.pool_gpu_shape, name="pool-gpu-shape"),
    path("nodes/", views.node_list, name="node-list"),
    path("nodes/<int:pk>/", views.node_detail, name="node-detail"),
    path("nodes/<int:pk>/move/", views.node_move, name="node-move"),
    # The column chooser of every table.
    path("", include("ui.urls")),
]
