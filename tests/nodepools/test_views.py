"""The home page: each pool the user may see, with nodes and GPUs total / allocated / free."""
import re

import pytest
from django.urls import reverse


def rows(response):
    """Table rows of the home page as lists of cell texts."""
    html = response.content.decode()
    if "<tbody>" not in html:
        return []
    return [[re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)]
            for row in re.findall(r"<tr>(.*?)</tr>", html.split("<tbody>")[1], re.S)]


def test_anonymous_users_are_sent_to_log_in(client, db):
    response = client.get(reverse("home"))
    assert response.status_code == 302 and response.url.startswith(reverse("login"))


def test_login_then_home_lists_pools_with_gpu_numbers(client, org, users):
    org.run("train-1", org.rnd_a, "a100-1", gpus=3)
    response = client.post(reverse("login"), {"username": "sysadmin", "password": "pw-sysadmin"}, follow=True)
    assert response.status_code == 200
    assert rows(response) == [
        # cluster, pool, status, label, nodes, GPUs total, ready, allocated, free
        ["lab", "default", "Ready", "—", "2", "8", "8", "0", "8"],
        ["lab", "a100", "Ready", "gpu-type=A100", "2", "8", "8", "3", "5"],
    ]


def test_wrong_password_is_refused(client, users):
    response = client.post(reverse("login"), {"username": "sysadmin", "password": "nope"})
    assert response.status_code == 200 and b"didn't match" in response.content


def test_user_without_roles_sees_no_pools(client, users):
    client.force_login(users["nobody"])
    response = client.get(reverse("home"))
    assert b"No node pools you may see yet" in response.content and rows(response) == []


@pytest.mark.parametrize("role", ["rnd_admin", "rnd_viewer", "researcher"])
def test_scoped_roles_see_their_clusters_pools(client, users, second_cluster_pool, role):
    client.force_login(users[role])
    assert [row[:2] for row in rows(client.get(reverse("home")))] == [["lab", "default"], ["lab", "a100"]]


@pytest.fixture
def second_cluster_pool(db):
    from nodepools import services

    other = services.cluster_create(actor=None, name="other")
    return services.pool_create(actor=None, cluster=other, name="t4", label_key="gpu-type", label_value="T4")


def test_logout(client, users):
    client.force_login(users["sysadmin"])
    response = client.post(reverse("logout"))
    assert response.status_code == 302
    assert client.get(reverse("home")).status_code == 302
