"""API routes of the ledger (mounted under /api/v1/)."""
from django.urls import re_path

from common.api import Router
from ledger.api import views

router = Router()
router.register("ledger-entries", views.LedgerEntryViewSet, basename="ledgerentry")
router.register("rates", views.RateViewSet, basename="rate")
urlpatterns = router.urls + [
    re_path(r"^departments/(?P<pk>[0-9]{1,18})/statement/?$", views.DepartmentStatement.as_view(),
            name="department-statement"),
    re_path(r"^clusters/(?P<pk>[0-9]{1,18})/statement/?$", views.ClusterStatement.as_view(), name="cluster-statement"),
]
