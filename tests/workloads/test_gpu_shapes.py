"""A submission asks for a MIG profile or a GPU fraction (issue 30, point 6): the dry run renders the Job
with `nvidia.com/mig-<profile>` or KAI's `gpu-fraction` annotation and gives a verdict in GPU-equivalents; a
pool without such a shape refuses it, naming the field."""
from __future__ import annotations

from decimal import Decimal

import pytest

from kubesim import make_node
from nodepools.demo_cluster import operand_pods
from workloads.models import Workload

pytestmark = pytest.mark.django_db


@pytest.fixture
def shared(org):
    """org (tests/conftest.py) with KAI, plus pool mig (one A100 80GB node in MIG all-balanced, mixed)."""
    from enforcers.services import enforcement_set
    from nodepools import services as pool_services

    enforcement_set(actor=None, cluster=org.cluster, enforcer="kai")
    org.mig = pool_services.pool_create(actor=None, cluster=org.cluster, name="mig", label_key="gpu-type",
                                        label_value="A100-MIG")
    node = make_node("mig-1", gpus=8, gpu_product="NVIDIA-A100-SXM4-80GB", mig_config="all-balanced",
                     labels={"gpu-type": "A100-MIG"})
    org.nodes.append(node)
    org.pods += operand_pods([node])
    org.load()
    return org


def submit(api, user, project, **fields):
    body = {"project": project.pk, "image": "nvcr.io/nvidia/pytorch:24.05-py3", "cpu": "1", "memory": "1Gi",
            "dry_run": True, **fields}
    return api(user).post("/api/v1/workloads/", body, format="json")


def test_a_mig_profile_renders_its_resource_and_fits_on_the_pools_slices(shared, users, api):
    answer = submit(api, users["researcher"], shared.rnd_a, pools=["mig"], gpus=2, gpu_profile="1g.10gb")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    container = body["job"]["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {"nvidia.com/mig-1g.10gb": "2"}
    assert "nvidia.com/gpu" not in container["resources"]["requests"]
    assert body["verdict"]["verdict"] == "starts_now", body["verdict"]
    assert not Workload.objects.exists()


def test_a_profile_no_node_of_the_pool_publishes_is_refused_naming_the_field(shared, users, api):
    answer = submit(api, users["researcher"], shared.rnd_a, pools=["mig"], gpus=1, gpu_profile="7g.80gb")
    assert answer.status_code == 400, answer.content
    body = answer.json()
    assert "gpu_profile" in str(body) and "No node of mig publishes MIG slices of 7g.80gb" in body["detail"]
    assert "1g.10gb, 2g.20gb, 3g.40gb" in body["detail"]
    # A pool of whole GPUs has no slices at all.
    whole = submit(api, users["researcher"], shared.rnd_a, pools=["a100"], gpus=1, gpu_profile="1g.10gb").json()
    assert "they have no MIG slices" in whole["detail"]
    bad = submit(api, users["researcher"], shared.rnd_a, pools=["mig"], gpus=1, gpu_profile="big").json()
    assert "is not a MIG profile" in str(bad["errors"]["gpu_profile"])


def test_a_gpu_fraction_is_an_annotation_and_counts_its_share(shared, users, api):
    answer = submit(api, users["researcher"], shared.rnd_a, pools=["a100"], gpu_fraction="0.5")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    template = body["job"]["spec"]["template"]
    assert template["metadata"]["annotations"]["gpu-fraction"] == "0.5"
    assert "nvidia.com/gpu" not in template["spec"]["containers"][0]["resources"].get("limits", {})
    assert body["verdict"]["verdict"] == "starts_now", body["verdict"]
    assert "0.5 GPUs" in body["verdict"]["headline"]


def test_a_fraction_is_refused_where_nothing_can_share_a_whole_gpu(shared, users, api):
    answer = submit(api, users["researcher"], shared.rnd_a, pools=["mig"], gpu_fraction="0.5")
    assert answer.status_code == 400 and "gpu_fraction" in str(answer.json())
    assert "No node of mig has whole GPUs to share" in answer.json()["detail"]
    wrong = submit(api, users["researcher"], shared.rnd_a, pools=["a100"], gpu_fraction="1.5").json()
    assert "at most 1" in str(wrong["errors"]["gpu_fraction"])
    both = submit(api, users["researcher"], shared.rnd_a, pools=["a100"], gpu_fraction="0.5",
                  gpu_profile="1g.10gb").json()
    assert "not both" in str(both["errors"]["gpu_fraction"])


def test_without_kai_a_fraction_is_refused(org, users, api):
    answer = submit(api, users["researcher"], org.rnd_a, pools=["a100"], gpu_fraction="0.25")
    assert answer.status_code == 400
    assert "not scheduled by KAI Scheduler" in answer.json()["detail"]


def test_the_sync_counts_a_fraction_jobs_gpus_from_its_pod_templates_annotations(shared, users, api):
    """The Job as submitted (the dry run's rendering), as the sync stores it: the workloads table's GPUs are the
    pods' share (two pods of half a GPU: 1), read from the pod template's `gpu-fraction` annotation."""
    from workloads.sync import JOB_VALUE_FIELDS, job_values

    job = submit(api, users["researcher"], shared.rnd_a, pools=["a100"], gpu_fraction="0.5", pods=2).json()["job"]
    job["metadata"]["uid"] = "u-1"
    values = dict(zip(JOB_VALUE_FIELDS, job_values(job)[0]))
    assert (values["pods"], values["gpus"]) == (2, Decimal("1.000"))
    job["spec"]["template"]["metadata"]["annotations"].pop("gpu-fraction")
    assert dict(zip(JOB_VALUE_FIELDS, job_values(job)[0]))["gpus"] == 0
