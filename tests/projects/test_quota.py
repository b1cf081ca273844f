"""Quota rules (docs/concepts.md#quota): zero rows, validation, warnings versus errors, the non-preemptible floor,
allocation, and edits that race."""
import threading
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection

from common.exceptions import ConcurrentUpdate
from nodepools import services as pool_services
from projects import services
from projects.models import Quota


def update(quota, **values):
    return services.quota_update(actor=None, quota=quota, expected_version=quota.version, **values)


# --- zero rows ----------------------------------------------------------------------------------------

def test_new_pool_gives_every_department_and_project_a_zero_row(org):
    pool = pool_services.pool_create(actor=None, cluster=org.cluster, name="h100", label_key="gpu-type", label_value="H100")
    rows = Quota.objects.filter(pool=pool)
    owners = {(q.department.name if q.department else None, q.project.name if q.project else None) for q in rows}
    assert owners == {("rnd", None), ("ops", None), (None, "rnd-a"), (None, "rnd-b"), (None, "ops-a")}
    assert {(q.gpu_deserved, q.cpu_deserved, q.memory_deserved_mib, q.gpu_limit, q.over_quota_weight, q.rank) for q in rows} == {
        (Decimal(0), None, None, None, 2, 3)}


def test_new_department_and_project_get_a_zero_row_in_every_pool(org):
    department = services.department_create(actor=None, cluster=org.cluster, name="finance")
    project = services.project_create(actor=None, department=department, name="fin-a")
    assert set(department.quotas.values_list("pool__name", "gpu_deserved")) == {("default", 0), ("a100", 0)}
    assert set(project.quotas.values_list("pool__name", "gpu_deserved")) == {("default", 0), ("a100", 0)}
    assert list(project.namespaces.values_list("name", flat=True)) == ["runai-fin-a"]


def test_rows_are_per_cluster(org):
    other = pool_services.cluster_create(actor=None, name="other")
    pool_services.pool_create(actor=None, cluster=other, name="t4", label_key="gpu-type", label_value="T4")
    assert not Quota.objects.filter(pool__cluster=other).exists()


# --- field validation ---------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "field, value, message",
    [
        ("gpu_deserved", "-1", "GPU quota cannot be negative"),
        ("gpu_deserved", "lots", "must be a decimal number"),
        ("gpu_deserved", "0.1255", "no more than 3 decimal places"),  # a 1g.10gb slice: 0.143
        ("cpu_deserved", "-0.5", "CPU quota cannot be negative"),
        ("cpu_deserved", "1.0005", "no more than 3 decimal places"),
        ("memory_deserved_mib", "1.5", "must be an integer"),
        ("memory_deserved_mib", "-1", "Memory quota cannot be negative"),
        ("gpu_limit", "x", "must be a decimal number"),
        ("over_quota_weight", "-1", "greater than or equal to 0"),
        ("over_quota_weight", "1.5", "must be an integer"),
        ("rank", 9, "is not a valid choice"),
    ],
)
def test_bad_quota_values_name_the_field_and_the_rule(org, field, value, message):
    quota = org.quota(org.rnd_a, org.default)
    with pytest.raises(ValidationError) as exc:
        update(quota, **{field: value})
    assert message in " ".join(exc.value.message_dict[field])
    quota.refresh_from_db()
    assert (quota.gpu_deserved, quota.version) == (0, 1)  # nothing stored


def test_good_quota_values_are_saved(org):
    quota = org.quota(org.rnd, org.default)
    result = update(quota, gpu_deserved="2.5", cpu_deserved="16.250", memory_deserved_mib=65536, gpu_limit="4",
                    over_quota_weight=3, rank=6)
    quota.refresh_from_db()
    assert (quota.gpu_deserved, quota.cpu_deserved, quota.memory_deserved_mib, quota.gpu_limit, quota.over_quota_weight,
            quota.rank, quota.version) == (Decimal("2.5"), Decimal("16.25"), 65536, Decimal(4), 3, 6, 2)
    assert result.warnings == []


def test_limit_below_deserved_is_an_error(org):
    with pytest.raises(ValidationError) as exc:
        update(org.quota(org.rnd, org.default), gpu_deserved=4, gpu_limit=2)
    assert "cannot be lower than the deserved GPU quota" in exc.value.message_dict["gpu_limit"][0]


def test_empty_cpu_and_memory_mean_unlimited(org):
    quota = org.quota(org.rnd, org.default)
    update(quota, cpu_deserved="8", memory_deserved_mib="1024")
    quota.refresh_from_db()
    update(quota, cpu_deserved="", memory_deserved_mib="")
    quota.refresh_from_db()
    assert (quota.cpu_deserved, quota.memory_deserved_mib) == (None, None)


# --- department sums and pool over-subscription ----------------------------------------------------

def test_projects_over_department_quota_is_a_warning_by_default(org):
    update(org.quota(org.rnd, org.default), gpu_deserved=4)
    update(org.quota(org.rnd_a, org.default), gpu_deserved=3)
    result = update(org.quota(org.rnd_b, org.default), gpu_deserved=2)
    # Said in the present tense of what was saved, not "would".
    assert result.warnings == ["Projects of rnd now have 5 GPUs deserved in default, above the department's 4."]
    assert org.quota(org.rnd_b, org.default).gpu_deserved == 2


def test_projects_within_department_quota_give_no_warning(org):
    update(org.quota(org.rnd, org.default), gpu_deserved=4)
    update(org.quota(org.rnd_a, org.default), gpu_deserved=2)
    assert update(org.quota(org.rnd_b, org.default), gpu_deserved=2).warnings == []


def test_projects_over_department_quota_is_an_error_when_the_cluster_limits_them(org):
    pool_services.cluster_update(actor=None, cluster=org.cluster, limit_projects_to_department_quota=True)
    update(org.quota(org.rnd, org.default), gpu_deserved=4)
    update(org.quota(org.rnd_a, org.default), gpu_deserved=3)
    with pytest.raises(ValidationError) as exc:
        update(org.quota(org.rnd_b, org.default), gpu_deserved=2)
    assert "limits projects to their department's quota" in exc.value.message_dict["gpu_deserved"][0]
    assert org.quota(org.rnd_b, org.default).gpu_deserved == 0


def test_lowering_a_department_below_its_projects_is_checked_too(org):
    update(org.quota(org.rnd, org.default), gpu_deserved=4)
    update(org.quota(org.rnd_a, org.default), gpu_deserved=4)
    assert update(org.quota(org.rnd, org.default), gpu_deserved=2).warnings == [
        "Projects of rnd now have 4 GPUs deserved in default, above the department's 2."]
    pool_services.cluster_update(actor=None, cluster=org.cluster, limit_projects_to_department_quota=True)
    with pytest.raises(ValidationError):
        update(org.quota(org.rnd, org.default), gpu_deserved=1)


def test_unlimited_cpu_of_a_department_never_warns(org):
    update(org.quota(org.rnd_a, org.default), cpu_deserved="64")
    assert update(org.quota(org.rnd_b, org.default), cpu_deserved="64").warnings == []


def test_oversubscribing_a_pool_is_a_warning_and_allowed(org):
    # The default pool has 8 GPUs (two V100 nodes of 4).
    assert update(org.quota(org.rnd, org.default), gpu_deserved=6).warnings == []
    result = update(org.quota(org.ops, org.default), gpu_deserved=4)
    assert result.warnings == [
        "Departments now have 10 GPUs deserved in default, above its 8 ready GPUs (of 8): over-subscription ratio 1.25."
    ]
    assert org.quota(org.ops, org.default).gpu_deserved == 4


# --- the non-preemptible floor --------------------------------------------------------------------

def test_quota_cannot_go_below_non_preemptible_usage(org):
    org.run("infer", org.rnd_a, "v100-1", gpus=3, priority=125)  # inference: not preemptible
    with pytest.raises(ValidationError) as exc:
        update(org.quota(org.rnd_a, org.default), gpu_deserved=2)
    assert exc.value.message_dict["gpu_deserved"] == [
        "Non-preemptible workloads of project 'rnd-a' already use 3 GPUs in pool 'default'; its GPU quota cannot be "
        "set below that."
    ]
    assert update(org.quota(org.rnd_a, org.default), gpu_deserved=3).quota.gpu_deserved == 3


def test_department_floor_sums_its_projects(org):
    org.run("infer-a", org.rnd_a, "v100-1", gpus=2, priority=100)
    org.run("infer-b", org.rnd_b, "v100-2", gpus=1, priority=125)
    with pytest.raises(ValidationError, match="already use 3 GPUs"):
        update(org.quota(org.rnd, org.default), gpu_deserved="2.5")
    update(org.quota(org.rnd, org.default), gpu_deserved=3)


def test_preemptible_usage_does_not_set_a_floor(org):
    org.run("train", org.rnd_a, "v100-1", gpus=4, priority=50)
    assert update(org.quota(org.rnd_a, org.default), gpu_deserved=0).quota.gpu_deserved == 0


def test_quota_below_what_a_project_runs_is_saved_with_a_warning(org):
    update(org.quota(org.rnd, org.a100), gpu_deserved=8)
    update(org.quota(org.rnd_a, org.a100), gpu_deserved=8)
    org.run("train-1", org.rnd_a, "a100-1", gpus=4, priority=50)
    org.run("train-2", org.rnd_a, "a100-2", gpus=2, priority=75)
    result = update(org.quota(org.rnd_a, org.a100), gpu_deserved=4)
    assert result.quota.gpu_deserved == 4
    assert result.warnings == [
        "rnd-a runs 6 GPUs in a100, above its deserved 4: 2 GPUs are over quota and may be preempted."]
    # At or above what it runs: nothing to say.
    assert update(org.quota(org.rnd_a, org.a100), gpu_deserved=6).warnings == []


def test_department_quota_below_what_its_projects_run_is_a_warning_too(org):
    update(org.quota(org.rnd, org.a100), gpu_deserved=4)
    org.run("train-a", org.rnd_a, "a100-1", gpus=4)
    org.run("train-b", org.rnd_b, "a100-2", gpus=1)
    assert update(org.quota(org.rnd, org.a100), gpu_deserved=4).warnings == [
        "rnd runs 5 GPUs in a100, above its deserved 4: 1 GPU is over quota and may be preempted."]


def test_limit_lower_than_the_ready_gpus_is_what_oversubscribes(org):
    pool_services.pool_update(actor=None, pool=org.a100, gpu_limit=6)
    assert update(org.quota(org.rnd, org.a100), gpu_deserved=7).warnings == [
        "Departments now have 7 GPUs deserved in a100, above its GPU limit of 6."]


def test_cpu_floor(org):
    org.run("build", org.rnd_a, "v100-1", gpus=0, cpu="6", priority=100)
    with pytest.raises(ValidationError) as exc:
        update(org.quota(org.rnd_a, org.default), cpu_deserved="5.5")
    assert "already use 6 cores" in exc.value.message_dict["cpu_deserved"][0]


# --- allocation -------------------------------------------------------------------------------------

def test_allocation_per_project_and_department_with_over_quota(org):
    update(org.quota(org.rnd, org.default), gpu_deserved=2)
    update(org.quota(org.rnd_a, org.default), gpu_deserved=1)
    org.run("train-1", org.rnd_a, "v100-1", gpus=2, priority=50)
    org.run("infer-1", org.rnd_a, "v100-2", gpus=1, priority=125)
    org.run("build-1", org.rnd_b, "v100-2", gpus=1, priority=75)
    org.run("pending", org.rnd_b, None, gpus=4, phase="Pending")
    org.run("finished", org.rnd_b, "v100-1", gpus=4, phase="Failed")
    org.run("other-pool", org.rnd_a, "a100-1", gpus=1)
    rows = {(q.department_id and q.department.name or q.project.name): q
            for q in Quota.objects.with_allocation().filter(pool=org.default)}
    assert (rows["rnd-a"].gpu_allocated, rows["rnd-a"].gpu_non_preemptible, rows["rnd-a"].gpu_over_quota) == (3, 1, 2)
    assert (rows["rnd-b"].gpu_allocated, rows["rnd-b"].gpu_non_preemptible, rows["rnd-b"].gpu_over_quota) == (1, 0, 1)
    assert (rows["rnd"].gpu_allocated, rows["rnd"].gpu_non_preemptible, rows["rnd"].gpu_over_quota) == (4, 1, 2)
    assert (rows["ops"].gpu_allocated, rows["ops"].gpu_over_quota) == (0, 0)
    assert rows["rnd-a"].cpu_allocated == 2.0 and rows["rnd-a"].memory_allocated_mib == 2048.0
    assert rows["rnd-a"].cpu_over_quota == 0.0  # unlimited CPU quota: nothing is over it


def test_allocation_is_computed_in_one_query(org, django_assert_num_queries):
    org.run("train-1", org.rnd_a, "v100-1", gpus=2)
    with django_assert_num_queries(1):
        rows = list(Quota.objects.with_allocation())
    assert sum(q.gpu_allocated for q in rows) == 4  # the project's row and its department's


# --- concurrent edits -------------------------------------------------------------------------------

def test_stale_version_is_refused_and_nothing_is_overwritten(org):
    quota = org.quota(org.rnd_a, org.default)
    stale = Quota.objects.get(pk=quota.pk)
    update(quota, gpu_deserved=1)
    with pytest.raises(ConcurrentUpdate, match="changed by someone else meanwhile"):
        services.quota_update(actor=None, quota=stale, expected_version=stale.version, gpu_deserved=5)
    quota.refresh_from_db()
    assert (quota.gpu_deserved, quota.version) == (1, 2)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_connections_racing_on_one_row_save_one_and_tell_the_other(org):
    assert connection.vendor == "postgresql"
    quota = org.quota(org.rnd_a, org.default)
    version = quota.version
    barrier = threading.Barrier(2)
    outcomes = {}

    def edit(value):
        from django.db import connection as thread_connection

        try:
            barrier.wait(timeout=10)
            services.quota_update(actor=None, quota=Quota.objects.get(pk=quota.pk), expected_version=version,
                                  gpu_deserved=value)
            outcomes[value] = "saved"
        except ConcurrentUpdate:
            outcomes[value] = "conflict"
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=edit, args=(value,)) for value in (3, 7)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes.values()) == ["conflict", "saved"]
    quota.refresh_from_db()
    winner = next(value for value, outcome in outcomes.items() if outcome == "saved")
    assert (quota.gpu_deserved, quota.version) == (winner, version + 1)


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_racing_project_edits_cannot_both_pass_a_strict_department_limit(org):
    # Two different rows, each fine alone, together over the department: the department row lock
    # queues them so the second sees the first's value.
    pool_services.cluster_update(actor=None, cluster=org.cluster, limit_projects_to_department_quota=True)
    update(org.quota(org.rnd, org.default), gpu_deserved=4)
    barrier = threading.Barrier(2)
    outcomes = {}

    def edit(project):
        from django.db import connection as thread_connection

        try:
            barrier.wait(timeout=10)
            q = Quota.objects.get(pool=org.default, project=project)
            services.quota_update(actor=None, quota=q, expected_version=q.version, gpu_deserved=3)
            outcomes[project.name] = "saved"
        except ValidationError:
            outcomes[project.name] = "refused"
        finally:
            thread_connection.close()

    threads = [threading.Thread(target=edit, args=(p,)) for p in (org.rnd_a, org.rnd_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes.values()) == ["refused", "saved"]
    total = sum(Quota.objects.filter(pool=org.default, project__department=org.rnd).values_list("gpu_deserved", flat=True))
    assert total == 3
