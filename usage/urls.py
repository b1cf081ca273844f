from django.urls import path

from usage import views

urlpatterns = [
    path("usage/", views.history, name="usage-history"),
    path("usage/idle-gpus/", views.idle_gpus, name="usage-idle-gpus"),
    path("usage/export.csv", views.export, name="usage-export"),
]
