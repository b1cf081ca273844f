"""REST API under /api/v1/, its OpenAPI schema at /api/schema/ and docs at /api/docs/."""
urlpatterns: list = []
