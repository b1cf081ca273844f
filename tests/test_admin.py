"""The Django admin is registered for every model of the console and opens for a system administrator."""
import pytest
from django.apps import apps
from django.contrib import admin
from django.urls import reverse


CONSOLE_MODELS = [m for app in ("nodepools", "projects", "provisioning") for m in apps.get_app_config(app).get_models()]


def test_every_console_model_is_registered():
    assert CONSOLE_MODELS and all(admin.site.is_registered(model) for model in CONSOLE_MODELS)


@pytest.mark.parametrize("model", CONSOLE_MODELS, ids=lambda m: m.__name__)
def test_admin_changelists_open(admin_client, org, model):
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    assert admin_client.get(url).status_code == 200
