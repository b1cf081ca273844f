from django.urls import path

from ledger import views

urlpatterns = [
    path("statements/", views.statement_list, name="statement-list"),
    path("departments/<int:pk>/statement/", views.department_statement, name="department-statement"),
    path("clusters/<int:pk>/statement/", views.cluster_statement, name="cluster-statement"),
    path("ledger/", views.entries, name="ledger-entries"),
    path("ledger/export.csv", views.export, name="ledger-export"),
    path("rates/", views.rates, name="rates"),
    path("rates/new/", views.rate_create, name="rate-create"),
    path("rates/<int:pk>/edit/", views.rate_edit, name="rate-edit"),
    path("rates/<int:pk>/delete/", views.rate_delete, name="rate-delete"),
]
