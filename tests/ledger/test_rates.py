"""Rates: a price per GPU-hour of a GPU model (optionally of one pool) from a date, in one currency; set by
system administrators only (pages and API), every change audited; a change made meanwhile is refused."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from audit.models import AuditEvent
from ledger import services
from ledger.models import Rate

A100 = "NVIDIA-A100-SXM4-40GB"


def form(**values):
    data = {"gpu_model": A100, "pool": "", "currency": "eur", "valid_from": "2026-04-01", "gpu_hour": "2.10",
            "cpu_core_hour": "", "memory_gib_hour": "", "description": ""}
    data.update(values)
    return data


@pytest.mark.django_db
def test_a_system_administrator_adds_changes_and_deletes_a_rate_on_the_pages_audited(org, users, client):
    client.force_login(users["sysadmin"])
    page = client.get("/rates/new/")
    assert page.status_code == 200 and A100 in page.content.decode()  # the fleet's models are offered
    response = client.post("/rates/new/", form())
    assert response.status_code == 302
    rate = Rate.objects.get()
    assert (rate.currency, rate.gpu_hour, rate.valid_from) == ("EUR", Decimal("2.1"), dt.date(2026, 4, 1))
    listing = client.get("/rates/").content.decode()
    assert f'/rates/{rate.pk}/edit/' in listing and "Add a rate" in listing
    response = client.post(f"/rates/{rate.pk}/edit/", form(gpu_hour="1.95", version=rate.version))
    assert response.status_code == 302 and Rate.objects.get().gpu_hour == Decimal("1.95")
    assert client.post(f"/rates/{rate.pk}/delete/").status_code == 302 and not Rate.objects.exists()
    events = list(AuditEvent.objects.filter(object_type="rate").order_by("when", "pk").values_list("action", "actor_name"))
    assert events == [("create", "sysadmin"), ("update", "sysadmin"), ("delete", "sysadmin")]
    update = AuditEvent.objects.filter(object_type="rate", action="update").get()
    assert (Decimal(update.before["gpu_hour"]), Decimal(update.after["gpu_hour"])) == (Decimal("2.1"), Decimal("1.95"))


@pytest.mark.django_db
def test_no_one_else_changes_a_rate(org, users, client):
    rate = services.rate_create(actor=None, gpu_model=A100, currency="EUR", valid_from=dt.date(2026, 1, 1),
                                gpu_hour=Decimal(2))
    for role in ("rnd_admin", "rnd_viewer", "researcher", "cluster_viewer"):
        client.force_login(users[role])
        listing = client.get("/rates/")
        assert listing.status_code == 200 and "2.0000" in listing.content.decode()  # they read the prices
        assert "Add a rate" not in listing.content.decode()
        assert client.post("/rates/new/", form(valid_from="2026-05-01")).status_code == 403
        assert client.post(f"/rates/{rate.pk}/edit/", form(gpu_hour="0")).status_code == 403
        assert client.post(f"/rates/{rate.pk}/delete/").status_code == 403
    assert list(Rate.objects.values_list("gpu_hour", flat=True)) == [Decimal(2)]
    with pytest.raises(Exception, match="Only system administrators"):
        services.rate_update(actor=users["rnd_admin"], rate=rate, expected_version=None, gpu_hour=Decimal(0))


@pytest.mark.django_db
def test_bad_rates_are_refused_naming_the_field_and_the_rule(org, users, client):
    client.force_login(users["sysadmin"])
    services.rate_create(actor=None, gpu_model=A100, currency="EUR", valid_from=dt.date(2026, 1, 1), gpu_hour=Decimal(2))
    cases = [
        (form(valid_from="2026-01-01"), "Valid from: " + A100 + " already has a rate for every pool from 2026-01-01"),
        (form(currency="USD"), "Currency: Rates are in EUR"),
        (form(currency="E1"), "Currency: A currency is its ISO 4217 code"),
        (form(gpu_hour="-1"), "The price per GPU-hour cannot be negative."),
    ]
    for data, message in cases:
        page = client.post("/rates/new/", data)
        assert page.status_code == 200 and message in page.content.decode(), message
    assert Rate.objects.count() == 1


@pytest.mark.django_db
def test_the_api_sets_rates_for_system_administrators_and_refuses_a_stale_change(org, users, api):
    admin = api(users["sysadmin"])
    created = admin.post("/api/v1/rates/", {"gpu_model": A100, "pool": org.a100.pk, "currency": "EUR",
                                            "valid_from": "2026-02-01", "gpu_hour": "2.5"}, format="json")
    assert created.status_code == 201, created.json()
    pk = created.json()["id"]
    changed = admin.patch(f"/api/v1/rates/{pk}", {"gpu_hour": "2.4", "version": 1}, format="json")
    assert changed.status_code == 200 and changed.json()["gpu_hour"] == "2.4000" and changed.json()["version"] == 2
    stale = admin.patch(f"/api/v1/rates/{pk}", {"gpu_hour": "9", "version": 1}, format="json")
    assert stale.status_code == 409 and Rate.objects.get().gpu_hour == Decimal("2.4")
    refused = api(users["rnd_admin"]).patch(f"/api/v1/rates/{pk}", {"gpu_hour": "0"}, format="json")
    assert refused.status_code == 403
    assert api(users["researcher"]).get(f"/api/v1/rates/{pk}").json()["gpu_hour"] == "2.4000"
    assert api(users["nobody"]).get(f"/api/v1/rates/{pk}").status_code == 404
    bad = admin.post("/api/v1/rates/", {"gpu_model": A100, "currency": "USD", "valid_from": "2026-03-01",
                                        "gpu_hour": "1"}, format="json")
    assert bad.status_code == 400 and "currency" in bad.json()["errors"]
    assert admin.delete(f"/api/v1/rates/{pk}").status_code == 204
    assert list(AuditEvent.objects.filter(object_type="rate").values_list("action", "via").order_by("pk")) == [
        ("create", "api"), ("update", "api"), ("delete", "api")]


@pytest.mark.django_db
def test_the_rate_form_offers_the_clusters_gpu_models_and_defaults_the_currency_in_use(org, users, client):
    import re

    from tests.pages import page_text
    client.force_login(users["sysadmin"])
    html = client.get("/rates/new/").content.decode()
    # A choice of the models the nodes report, not free text.
    select = re.search(r'<select name="gpu_model"[^>]*>(.*?)</select>', html, re.S)
    assert select, "the GPU model is a choice"
    offered = re.findall(r'<option value="([^"]*)"', select.group(1))
    assert offered[0] == "" and A100 in offered
    assert offered[1:] == sorted(offered[1:])
    # No rate yet: no currency to default to.
    assert not re.search(r'name="currency"[^>]*value="', html)
    services.rate_create(actor=None, gpu_model=A100, currency="CHF", valid_from=dt.date(2026, 1, 1), gpu_hour=Decimal(2))
    html = client.get("/rates/new/").content.decode()
    assert re.search(r'<input[^>]*name="currency"[^>]*value="CHF"', html), "the currency in use is the default"
    assert "The rates are in CHF" in page_text(client.get("/rates/new/"))
    # A model the cluster does not have is refused, naming the field.
    page = client.post("/rates/new/", form(gpu_model="NVIDIA-A100-typo", currency="CHF", valid_from="2026-02-01"))
    assert page.status_code == 200
    assert "GPU model: Select a valid choice." in page_text(page)
    assert Rate.objects.count() == 1
