"""The enforcement page: the setting, its dry run, and who may change it."""
from __future__ import annotations

import pytest
from django.urls import reverse

from enforcers.models import Enforcement


@pytest.mark.django_db
def test_choosing_an_enforcer_shows_the_objects_first_and_saves_only_when_confirmed(client, org, users):
    client.force_login(users["sysadmin"])
    url = reverse("cluster-enforcement", args=[org.cluster.pk])
    page = client.get(url)
    assert page.status_code == 200 and "None (the console records quota only)" in page.content.decode()
    preview = client.post(url, {"enforcer": "kai"}).content.decode()
    # The cluster `lab` has no kubeconfig: the page says so and lists what would be created.
    assert "could not be read" in preview
    assert "SchedulingShard a100" in preview and "Queue rnd-a.a100" in preview
    assert "PriorityClass train" in preview
    assert not Enforcement.objects.filter(cluster=org.cluster).exists()
    done = client.post(url, {"enforcer": "kai", "confirm": "True"})
    assert done.status_code == 302
    assert Enforcement.objects.get(cluster=org.cluster).enforcer == "kai"


@pytest.mark.django_db
def test_only_system_administrators_choose_the_enforcer(client, org, users):
    url = reverse("cluster-enforcement", args=[org.cluster.pk])
    client.force_login(users["rnd_admin"])
    assert client.get(url).status_code == 200
    assert "Choose the enforcer" not in client.get(url).content.decode()
    assert client.post(url, {"enforcer": "kai", "confirm": "True"}).status_code == 403
    assert not Enforcement.objects.filter(cluster=org.cluster).exists()
    client.force_login(users["nobody"])
    assert client.get(url).status_code == 404


@pytest.mark.django_db
def test_a_pool_cannot_be_defined_by_the_consoles_own_pool_label(org):
    from django.core.exceptions import ValidationError

    from nodepools import services as pool_services

    with pytest.raises(ValidationError) as refused:
        pool_services.pool_create(actor=None, cluster=org.cluster, name="loop",
                                  label_key="console.gpu-capacity.io/node-pool", label_value="a100")
    assert "the console's own pool label" in str(refused.value.message_dict["label_key"])
