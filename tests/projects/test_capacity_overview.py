"""The overview shows per pool what the quota grid's head shows: ready / total GPUs, the departments'
deserved GPUs and the over-subscription ratio, marked in words and by class above 1."""
import re

from django.urls import reverse

from tests.pages import htmx, login, table_rows


def overview_capacity(response):
    html = response.content.decode()
    rows = {r[0]: r[1:] for r in table_rows(response, "pool-capacity")}
    table = re.search(r'<table[^>]*id="pool-capacity".*?</table>', html, re.S).group(0)
    marked = re.findall(r'<tr data-pool="([^"]+)">(?:(?!</tr>).)*class="num oversubscribed"', table, re.S)
    return rows, marked


def test_overview_shows_ready_total_deserved_sum_and_ratio_per_pool(client, org, users):
    from projects import services

    for owner, pool, gpus in [(org.rnd, org.a100, 6), (org.ops, org.a100, 4), (org.rnd, org.default, 2)]:
        services.quota_update(actor=None, quota=org.quota(owner, pool), expected_version=None, gpu_deserved=gpus)
    # Projects' quota is not the departments': it does not count towards the pool's over-subscription.
    services.quota_update(actor=None, quota=org.quota(org.rnd_a, org.default), expected_version=None, gpu_deserved=2)
    login(client, users, "sysadmin")
    response = client.get(reverse("cluster-overview", args=[org.cluster.pk]))
    rows, marked = overview_capacity(response)
    assert rows == {
        "default": ["8 / 8", "2", "0.25"],
        "a100": ["8 / 8", "10", "1.25 over-subscribed"],
    }
    assert marked == ["a100"]
    # The live region of the overview carries it too (it refetches on quota hints).
    assert 'id="pool-capacity"' in htmx(client, reverse("cluster-overview", args=[org.cluster.pk])).content.decode()


def test_overview_capacity_is_the_pools_whoever_looks(client, org, users):
    from projects import services

    services.quota_update(actor=None, quota=org.quota(org.ops, org.a100), expected_version=None, gpu_deserved=9)
    login(client, users, "rnd_viewer")  # ops is not theirs, yet the pool is over-subscribed
    rows, marked = overview_capacity(client.get(reverse("cluster-overview", args=[org.cluster.pk])))
    assert rows["a100"] == ["8 / 8", "9", "1.13 over-subscribed"] and marked == ["a100"]
