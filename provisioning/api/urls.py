"""API routes of provisioning (mounted under /api/v1/)."""
from django.urls import re_path

from provisioning.api import pending_views, views

ID = r"(?P<pk>[0-9]{1,18})"
NAME = r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?"
urlpatterns = [
    re_path(rf"^node-pools/{ID}/provisioning/?$", views.PoolProvisioningView.as_view(), name="pool-provisioning"),
    re_path(rf"^node-pools/{ID}/pending-gpu-pods/?$", pending_views.PoolPendingPodsView.as_view(),
            name="nodepool-pending-gpu-pods"),
    re_path(rf"^node-pools/{ID}/advice/?$", pending_views.PoolAdviceView.as_view(), name="nodepool-advice"),
    re_path(rf"^clusters/{ID}/pods/(?P<namespace>{NAME})/(?P<name>{NAME})/provisioning/?$",
            pending_views.PodProvisioningView.as_view(), name="pod-provisioning"),
]
