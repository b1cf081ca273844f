"""Creating a pool and changing a pool's label say first what moves (nodes, GPUs, running workloads)
and which pools' deserved quota their ready GPUs no longer cover; nothing is saved without confirming."""
import re

from django.urls import reverse

from nodepools import selectors, services
from nodepools.models import Node, NodePool
from projects import services as org_services
from tests.pages import login, page_text

V100_LABEL = {"label_key": "nvidia.com/gpu.product", "label_value": "Tesla-V100-SXM2-16GB"}


def create_data(org, **extra):
    return {"cluster": org.cluster.pk, "name": "v100", **V100_LABEL, "gpu_placement": "binpack",
            "cpu_placement": "binpack", "description": "", "gpu_limit": "", **extra}


def previewed_of(response) -> str:
    return re.search(r'name="previewed" value="([^"]*)"', response.content.decode()).group(1)


def test_creating_a_pool_previews_moved_nodes_gpus_workloads_and_oversubscribed_pools(client, org, users):
    org_services.quota_update(actor=None, quota=org.quota(org.rnd, org.default), expected_version=None, gpu_deserved=6)
    org.run("train-1", org.rnd_a, "v100-1", gpus=3)
    login(client, users, "sysadmin")
    response = client.post(reverse("pool-create"), create_data(org))
    page = page_text(response)
    assert response.status_code == 200 and "Before you save: what moves" in page
    assert "default v100 2: v100-1, v100-2 8 (8 ready) 3 1" in page
    assert "default 2 → 0 8 → 0 6 over-subscribed by 6 GPUs" in page
    assert ("Pool default: its departments' deserved quota (6 GPUs) then exceeds its 0 ready GPUs "
            "(today 8 ready GPUs cover it).") in page
    # Nothing is saved until the confirmation.
    assert not NodePool.objects.filter(name="v100").exists()
    assert set(Node.objects.filter(name__startswith="v100").values_list("pool__name", flat=True)) == {"default"}
    response = client.post(reverse("pool-create"), {**create_data(org), "confirm": "1",
                                                    "previewed": previewed_of(response)})
    pool = NodePool.objects.get(name="v100")
    assert response.status_code == 302 and response.url == reverse("pool-detail", args=[pool.pk])
    assert sorted(pool.nodes.values_list("name", flat=True)) == ["v100-1", "v100-2"]


def test_a_confirmation_of_another_label_than_the_one_previewed_previews_again(client, org, users):
    login(client, users, "sysadmin")
    first = client.post(reverse("pool-create"), create_data(org))
    response = client.post(reverse("pool-create"), {**create_data(org, label_value="Tesla-T4"), "confirm": "1",
                                                    "previewed": previewed_of(first)})
    page = page_text(response)
    assert response.status_code == 200 and not NodePool.objects.filter(name="v100").exists()
    assert "The label changed since the last preview" in page
    assert "No node carries nvidia.com/gpu.product=Tesla-T4: the pool will be empty." in page


def test_a_new_pool_whose_label_matches_no_node_says_it_will_be_empty(client, org, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("pool-create"), create_data(org, name="xyz", label_key="gpu-type",
                                                               label_value="xyz"))
    page = page_text(response)
    assert "No node carries gpu-type=xyz: the pool will be empty." in page
    assert "No node changes pool." in page
    assert not NodePool.objects.filter(name="xyz").exists()


def test_a_64_character_label_value_reaches_the_servers_message(client, org, users):
    login(client, users, "sysadmin")
    form = client.get(reverse("pool-create")).content.decode()
    for name in ("label_key", "label_value"):
        tag = re.search(rf'<input[^>]*name="{name}"[^>]*>', form).group(0)
        assert "maxlength" not in tag, tag
    response = client.post(reverse("pool-create"), create_data(org, label_key="gpu-type", label_value="a" * 64))
    page = page_text(response)
    assert ("Label value: Use letters, digits, '-', '_' and '.'; start and end with a letter or digit; at most 63 "
            "characters; or empty (it has 64 characters).") in page
    assert "Ensure this value has at most" not in page
    # What was typed is kept, all 64 characters.
    assert 'value="%s"' % ("a" * 64) in response.content.decode()
    assert not NodePool.objects.filter(name="v100").exists()


def test_changing_a_pools_label_previews_and_needs_confirmation(client, org, users):
    org_services.quota_update(actor=None, quota=org.quota(org.ops, org.a100), expected_version=None, gpu_deserved=4)
    org.run("ops-job", org.ops_a, "a100-2", gpus=1)
    login(client, users, "sysadmin")
    data = {"name": "a100", "label_key": "gpu-type", "label_value": "A100-80GB", "description": "",
            "gpu_placement": "binpack", "cpu_placement": "binpack", "gpu_limit": ""}
    response = client.post(reverse("pool-edit", args=[org.a100.pk]), data)
    page = page_text(response)
    assert "a100 default 2: a100-1, a100-2 8 (8 ready) 1 1" in page
    assert "a100 2 → 0 8 → 0 4 over-subscribed by 4 GPUs" in page
    assert "No node carries gpu-type=A100-80GB: the pool will be empty." in page
    org.a100.refresh_from_db()
    assert org.a100.label_value == "A100"
    response = client.post(reverse("pool-edit", args=[org.a100.pk]),
                           {**data, "confirm": "1", "previewed": previewed_of(response)})
    assert response.status_code == 302
    org.a100.refresh_from_db()
    assert org.a100.label_value == "A100-80GB" and not org.a100.nodes.exists()


def test_changing_only_the_description_saves_at_once(client, org, users):
    login(client, users, "sysadmin")
    response = client.post(reverse("pool-edit", args=[org.a100.pk]), {
        "name": "a100", "label_key": "gpu-type", "label_value": "A100", "description": "Fast",
        "gpu_placement": "binpack", "cpu_placement": "binpack", "gpu_limit": ""})
    assert response.status_code == 302
    org.a100.refresh_from_db()
    assert org.a100.description == "Fast"


def test_the_preview_follows_the_syncs_rule_first_created_pool_wins_a_conflict(org, users):
    from kubesim import make_node

    org.nodes.append(make_node("both-1", gpus=4, labels={"gpu-type": "A100", "speed": "fast"}))
    org.nodes.append(make_node("fast-1", gpus=2, labels={"speed": "fast"}))
    org.load()
    preview = services.pool_create_preview(actor=users["sysadmin"], cluster=org.cluster, name="fast",
                                           label_key="speed", label_value="fast")
    # both-1 stays in a100 (created first); only fast-1 leaves default.
    assert [(f.source.name, f.target.name, f.nodes) for f in preview.flows] == [("default", "fast", ["fast-1"])]
    assert preview.as_dict()["flows"][0]["gpus"] == 2
    pool = services.pool_create(actor=users["sysadmin"], cluster=org.cluster, name="fast", label_key="speed",
                                label_value="fast")
    assert Node.objects.get(name="both-1").pool == org.a100 and Node.objects.get(name="fast-1").pool == pool


def test_the_preview_is_for_system_administrators_only(org, users):
    import pytest
    from django.core.exceptions import PermissionDenied

    with pytest.raises(PermissionDenied):
        services.pool_create_preview(actor=users["rnd_admin"], cluster=org.cluster, name="x", label_key="k",
                                     label_value="v")
    with pytest.raises(PermissionDenied):
        services.pool_update_preview(actor=users["rnd_admin"], pool=org.a100, label_value="B")
    assert selectors.capacity_preview(user=users["sysadmin"], cluster=org.cluster).flows == []
