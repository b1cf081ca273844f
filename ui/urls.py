from django.urls import path

from ui import views

urlpatterns = [
    path("tables/<slug:table>/columns/", views.table_columns, name="table-columns"),
]
