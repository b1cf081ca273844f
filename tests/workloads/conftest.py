"""A heterogeneous pool like OSMO's example: L40S nodes and tainted A100 nodes, two platforms."""
from __future__ import annotations

import pytest

L40S_TEMPLATE = {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L40S"}}}
A100_TEMPLATE = {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-A100"}, "tolerations": [
    {"key": "nvidia.com/gpu.product", "operator": "Equal", "value": "NVIDIA-A100", "effect": "NoSchedule"}]}}
DEFAULT_USER = {"spec": {"containers": [{"name": "{{ WF_TASK_NAME }}", "resources": {
    "limits": {"cpu": "{{ USER_CPU }}", "memory": "{{ USER_MEMORY }}", "nvidia.com/gpu": "{{ USER_GPU }}"}}}]}}
A100_TAINT = {"key": "nvidia.com/gpu.product", "value": "NVIDIA-A100", "effect": "NoSchedule"}


class Hetero:
    def __init__(self, org):
        from kubesim import make_node
        from nodepools import services as pool_services
        from nodepools.demo_cluster import operand_pods
        from workloads import services

        self.org = org
        self.pool = pool_services.pool_create(actor=None, cluster=org.cluster, name="hetero", label_key="pool",
                                              label_value="hetero")
        new_nodes = [
            make_node("l40s-1", gpus=4, gpu_product="NVIDIA-L40S", labels={"pool": "hetero"}, cpu="32", memory="256Gi"),
            make_node("a100-big", gpus=8, gpu_product="NVIDIA-A100", labels={"pool": "hetero"}, taints=[A100_TAINT]),
            make_node("a100-small", gpus=2, gpu_product="NVIDIA-A100", labels={"pool": "hetero"}, taints=[A100_TAINT]),
        ]
        org.nodes += new_nodes
        org.pods += operand_pods(new_nodes)  # the NVIDIA operands run there: the nodes are Ready
        org.load()
        # 6 of a100-big's 8 GPUs are taken: 2 free there, 2 free on a100-small.
        org.run("big-job", org.rnd_a, "a100-big", gpus=6, cpu="8", memory="64Gi")
        self.default_user = services.pod_template_create(actor=None, cluster=org.cluster, name="default_user",
                                                         body=DEFAULT_USER)
        self.l40s = services.pod_template_create(actor=None, cluster=org.cluster, name="l40s", body=L40S_TEMPLATE)
        self.a100 = services.pod_template_create(actor=None, cluster=org.cluster, name="a100", body=A100_TEMPLATE)
        self.l40s_platform = services.platform_create(
            actor=None, pool=self.pool, name="l40s-platform", description="L40S platform",
            node_selector={"nvidia.com/gpu.product": "NVIDIA-L40S"}, override_templates=["l40s"])
        self.a100_platform = services.platform_create(
            actor=None, pool=self.pool, name="a100-platform", description="A100 platform",
            node_selector={"nvidia.com/gpu.product": "NVIDIA-A100"}, tolerations=A100_TEMPLATE["spec"]["tolerations"],
            override_templates=["a100"], rule_sets=["default_gpu"])
        services.pool_settings_update(actor=None, pool=self.pool, common_templates=["default_user"],
                                      rule_sets=["default_cpu", "default_memory"],
                                      default_variables={"USER_CPU": 2, "USER_MEMORY": "8Gi"})


@pytest.fixture
def hetero(org):
    return Hetero(org)


@pytest.fixture
def lab(org, sim, tmp_path):
    """`org` whose cluster is the emulator (kubeconfig on disk), holding the org's nodes and the
    projects' namespaces."""
    return on_emulator(org, sim, tmp_path / "kubeconfig")


def on_emulator(org, sim, kubeconfig):
    """`org`'s cluster made the emulator `sim` (its kubeconfig written at `kubeconfig`), which is given the org's
    nodes, pods and the projects' namespaces; returns `org`."""
    from nodepools import services as pool_services

    path = sim.write_kubeconfig(kubeconfig)
    pool_services.cluster_update(actor=None, cluster=org.cluster, kubeconfig_path=str(path), kube_context="emulator")
    org.cluster.refresh_from_db()
    sim.load(org.nodes, org.pods)
    for namespace in ("runai-rnd-a", "runai-rnd-b", "runai-ops-a"):
        sim.add_namespace(namespace)
    return org


def jobs_in(sim, namespace=None):
    return sim.list("jobs.batch", namespace)
