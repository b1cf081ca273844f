"""REST API under /api/v1/, its OpenAPI schema at /api/schema/ and docs at /api/docs/.

Every app's `api/urls.py` contributes its routes; all are named in the one namespace `api`.
"""
from django.urls import include, path
from django.utils import translation
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.response import Response

from common import caches

from audit.api.urls import urlpatterns as audit_api
from enforcers.api.urls import urlpatterns as enforcers_api
from ledger.api.urls import urlpatterns as ledger_api
from nodepools.api.urls import urlpatterns as nodepools_api
from projects.api.urls import urlpatterns as projects_api
from provisioning.api.urls import urlpatterns as provisioning_api
from usage.api.urls import urlpatterns as usage_api
from workloads.api.urls import urlpatterns as workloads_api

api_v1 = [*nodepools_api, *projects_api, *audit_api, *usage_api, *ledger_api, *enforcers_api, *provisioning_api,
          *workloads_api]

# The generated schema per (API version, language): it is public (the same for every caller) and fixed by the
# code, and generating it takes seconds; made once per process.
_SCHEMAS: dict[tuple, dict] = caches.register({})


class SchemaView(SpectacularAPIView):
    """drf-spectacular's schema view, generating the schema once per process (then only rendered)."""

    def _get_schema_response(self, request):
        version = self.api_version or request.version or self._get_version_parameter(request)
        key = (version, self.serve_public, translation.get_language())
        if key not in _SCHEMAS:
            _SCHEMAS[key] = super()._get_schema_response(request).data
        return Response(data=_SCHEMAS[key],
                        headers={"Content-Disposition": f'inline; filename="{self._get_filename(request, version)}"'})


urlpatterns = [
    path("api/v1/", include((api_v1, "api"))),
    path("api/schema/", SchemaView.as_view(), name="api-schema"),
    # The split view serves Swagger UI's start-up script as a file, so the CSP needs no inline script.
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
]
