"""API routes of clusters, node pools and nodes (mounted under /api/v1/ by console/api_urls.py)."""
from common.api import Router

from nodepools.api import views

router = Router()
router.register("clusters", views.ClusterViewSet, basename="cluster")
router.register("node-pools", views.NodePoolViewSet, basename="nodepool")
router.register("nodes", views.NodeViewSet, basename="node")
urlpatterns = router.urls
