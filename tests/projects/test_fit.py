"""Will it fit, and when? (issue 23) The pure arithmetic of `projects.fit` on scripted pools: each
fragmentation figure (pods of 1, 2, 4, 8 GPUs; the largest gang in the pool and inside one topology domain;
the histogram of free GPUs per node), what would make room and whose it is, each dry-run verdict and each
basis of a start estimate."""
from __future__ import annotations

from decimal import Decimal

import pytest

from projects import fit
from projects.fit import Ending, NodeRoom, Running, Shape, Standing, Waiting

D = Decimal


def nodes(*free, gpus=8, zones=None, ready=None):
    """Nodes n0, n1, … with `gpus` GPUs each and these free GPUs."""
    return [NodeRoom(f"n{i}", gpus, D(f), domain=(zones[i] if zones else ""), ready=(ready[i] if ready else True))
            for i, f in enumerate(free)]


# ---------------------------------------------------------------------------------------------------
# Fragmentation


def test_pods_of_each_size_that_fit_count_each_node_on_its_own():
    # 22 GPUs free in all, but only one node has 8 free: one pod of 8 fits, not two.
    frag = fit.fragmentation(nodes(8, 7, 3, 3, 1, 0))
    assert frag.free == 22
    assert frag.slots == {1: 22, 2: 3 + 1 + 1 + 4, 4: 2 + 1, 8: 1}
    assert frag.largest_free == 8
    assert frag.stranded(8) == 14 and frag.stranded(4) == 10
    assert frag.line() == "22 GPUs free: 1×8 · 3×4 · 9×2 · 22×1"


def test_the_histogram_counts_nodes_by_free_gpus_and_leaves_out_nodes_not_ready():
    frag = fit.fragmentation(nodes(8, 3, 3, 0, 8, gpus=8, ready=[True, True, True, True, False]))
    assert frag.histogram == ((0, 1), (3, 2), (8, 1))
    assert frag.nodes == 4 and frag.gpus == 32


def test_the_largest_gang_in_the_pool_and_inside_one_zone():
    # Zone a: 4 + 4 + 2 free (two 4-GPU pods); zone b: 8 + 4 (three 4-GPU pods, one 8-GPU pod).
    frag = fit.fragmentation(nodes(4, 4, 2, 8, 4, zones=["a", "a", "a", "b", "b"]))
    assert frag.largest_gang(4) == (5, 3, "b")
    assert frag.largest_gang(2) == (11, 6, "b")
    assert frag.largest_gang(8) == (1, 1, "b")
    zone_a = next(d for d in frag.domains if d.name == "a")
    assert (zone_a.nodes, zone_a.free, zone_a.slots[4]) == (3, 10, 2)


def test_a_pool_naming_its_own_topology_label_groups_by_it_and_counts_nodes_without_it():
    frag = fit.fragmentation(nodes(8, 8, 8, zones=["rack-1", "rack-1", ""]), domain_key="example.com/rack")
    assert frag.domain_key == "example.com/rack"
    assert frag.largest_gang(8) == (3, 2, "rack-1")
    assert frag.unlabelled == 1
    assert frag.as_dict()["largest_gang"][-1] == {"gpus_per_pod": 8, "pods": 3, "pods_in_one_domain": 2,
                                                  "domain": "rack-1"}


# ---------------------------------------------------------------------------------------------------
# Making room


def owners_of(*standings):
    return {(s.kind, s.name): s for s in standings}


def test_room_comes_from_over_quota_use_of_the_most_saturated_owner_first_and_names_whose_it_is():
    # Two nodes with 2 free each; nlp runs 6 GPUs with a deserved 2, cv 6 with 4 (3 of them non-preemptible).
    pool = nodes(2, 2, gpus=8)
    running = [Running("runai-nlp", "nlp-a", "n0", D(4), 50, "nlp", "rnd", created="2025-01-01T00:00:01Z"),
               Running("runai-nlp", "nlp-b", "n0", D(2), 50, "nlp", "rnd", created="2025-01-01T00:00:02Z"),
               Running("runai-cv", "cv-a", "n1", D(3), 50, "cv", "rnd"),
               Running("runai-cv", "cv-serve", "n1", D(3), 125, "cv", "rnd")]
    owners = owners_of(Standing("project", "nlp", D(2), D(6), fair_share=D(2)),
                       Standing("project", "cv", D(4), D(6), non_preemptible=D(3), fair_share=D(4)))
    room = fit.make_room(pool, running, owners, pods=1, gpus=8)
    # nlp is the most saturated (6 of 2): its newest pod goes first, then the older one — 2 + 6 free on n0.
    assert room.fits
    assert [v.pod.name for v in room.victims] == ["nlp-b", "nlp-a"]
    assert room.by_owner() == [("nlp", "rnd", D(6), 2)]
    assert "nlp (rnd): 6 GPUs in 2 pods" in room.words()
    # Non-preemptible pods are never taken: cv-serve stays, so two 8-GPU pods cannot be made room for.
    two = fit.make_room(pool, running, owners, pods=2, gpus=8)
    assert not two.fits and "2 asked" in two.reason


def test_room_inside_one_zone_takes_only_that_zones_pods():
    pool = nodes(4, 0, zones=["a", "b"], gpus=4)
    running = [Running("ns", "x", "n1", D(4), 50, "nlp", "rnd")]
    owners = owners_of(Standing("project", "nlp", D(0), D(4)))
    assert fit.make_room(pool, running, owners, pods=2, gpus=4).fits
    in_b = fit.make_room(pool, running, owners, pods=2, gpus=4, domain="b")
    assert not in_b.fits and in_b.domain == "b"


# ---------------------------------------------------------------------------------------------------
# The dry run


def standing(name="rnd-a", kind="project", **values):
    return Standing(kind, name, **{k: D(v) if isinstance(v, (int, str)) and k != "allow_over_quota" else v
                                   for k, v in values.items()})


def dry_run(shape, pool, running=(), *, project=None, department=None, others=(), karpenter=None, enforced=True):
    project = project or standing(deserved=4, fair_share=8)
    department = department or standing("rnd", "department", deserved=8, fair_share=16)
    owners = owners_of(project, department, *others)
    return fit.verdict(shape=shape, pool="a100", nodes=pool, running=list(running), owners=owners, project=project,
                       department=department, enforced=enforced, karpenter=karpenter)


def test_starts_now_when_free_room_holds_it():
    verdict = dry_run(Shape(2, 4), nodes(4, 4, gpus=4))
    assert verdict.code == fit.STARTS_NOW and verdict.pods_now == 2
    assert verdict.scheduler_outcome() == "running"


def test_starts_now_by_reclaiming_over_quota_use_of_another_department():
    pool = nodes(0, 0, gpus=4)
    running = [Running("runai-ops", "ops-x", "n0", D(4), 50, "ops-a", "ops", created="2025-01-01T00:00:01Z"),
               Running("runai-ops", "ops-y", "n1", D(4), 50, "ops-a", "ops", created="2025-01-01T00:00:02Z")]
    ops = standing("ops", "department", deserved=0, allocated=8, fair_share=4)
    verdict = dry_run(Shape(1, 4), pool, running, others=[ops, standing("ops-a", deserved=0, allocated=8, fair_share=4)])
    assert verdict.code == fit.STARTS_NOW and verdict.cause == "reclaim"
    assert [v.pod.name for v in verdict.room.victims] == ["ops-y"]
    assert "reclaiming over-quota GPUs" in verdict.headline


def test_starts_now_by_preempting_lower_priority_work_of_its_own_project():
    pool = nodes(0, gpus=4)
    running = [Running("runai-rnd-a", "train-1", "n0", D(4), 50, "rnd-a", "rnd")]
    project = standing(deserved=4, allocated=4, fair_share=4)
    verdict = dry_run(Shape(1, 4, priority=125), pool, running, project=project,
                      department=standing("rnd", "department", deserved=4, allocated=4, fair_share=4))
    assert verdict.code == fit.STARTS_NOW and verdict.cause == "preempt"
    assert verdict.room.victims[0].action == "preempt"


def test_waits_for_quota_over_its_limit():
    verdict = dry_run(Shape(1, 4), nodes(8), project=standing(deserved=2, allocated=2, limit=4, fair_share=8))
    assert verdict.code == fit.WAITS_FOR_QUOTA and verdict.cause == "limit"
    assert "uses 2 of its 4-GPU limit" in verdict.headline
    assert verdict.scheduler_outcome() == "limit"


def test_waits_for_quota_with_over_quota_off():
    verdict = dry_run(Shape(1, 4), nodes(8), project=standing(deserved=2, allow_over_quota=False, fair_share=2))
    assert verdict.code == fit.WAITS_FOR_QUOTA and verdict.cause == "over_quota_off"
    assert verdict.scheduler_outcome() == "limit"


def test_waits_for_quota_non_preemptible_beyond_the_deserved_quota():
    verdict = dry_run(Shape(1, 4, priority=125), nodes(8),
                      project=standing(deserved=2, non_preemptible=0, allocated=0, fair_share=8))
    assert verdict.code == fit.WAITS_FOR_QUOTA and verdict.cause == "non_preemptible"
    assert verdict.scheduler_outcome() == "non_preemptible_quota"


def test_waits_for_quota_when_others_over_quota_use_holds_the_pool_and_it_is_above_its_fair_share():
    pool = nodes(0, 0, gpus=4)
    running = [Running("runai-ops", "ops-x", "n0", D(4), 50, "ops-a", "ops"),
               Running("runai-rnd-b", "b-x", "n1", D(4), 50, "rnd-b", "rnd")]
    verdict = dry_run(Shape(1, 4), pool, running,
                      project=standing(deserved=0, allocated=0, fair_share=2),
                      others=[standing("ops-a", deserved=0, allocated=4, fair_share=3),
                              standing("rnd-b", deserved=2, allocated=4, fair_share=3),
                              standing("ops", "department", deserved=0, allocated=4, fair_share=3)])
    assert verdict.code == fit.WAITS_FOR_QUOTA and verdict.cause == "fair_share"
    assert verdict.borrowers == [("project ops-a", D(4)), ("project rnd-b", D(2))]
    assert "over-quota use of others holds 6 GPUs" in verdict.headline


def test_waits_for_capacity_with_the_fragmentation_answer():
    # 6 GPUs free, but 3 + 3: a pod of 4 does not fit, and nothing may be reclaimed (all in quota).
    pool = nodes(3, 3, gpus=4)
    running = [Running("ns", "a", "n0", D(1), 50, "rnd-b", "rnd"), Running("ns", "b", "n1", D(1), 50, "rnd-b", "rnd")]
    verdict = dry_run(Shape(1, 4), pool, running, others=[standing("rnd-b", deserved=2, allocated=2, fair_share=2)])
    assert verdict.code == fit.WAITS_FOR_CAPACITY and verdict.cause == "capacity"
    assert "6 GPUs are free on 2 Ready nodes; the most free on one node is 3" in verdict.headline
    assert "scattered over nodes (fragmentation)" in verdict.headline


def test_waits_for_a_node_karpenter_can_launch():
    karpenter = fit.Karpenter(True, "NodePool h100-prod can launch p5.48xlarge.", "h100-prod")
    verdict = dry_run(Shape(1, 8), nodes(4, gpus=4), karpenter=karpenter)
    assert verdict.code == fit.WAITS_FOR_NODE and "h100-prod" in verdict.headline


def test_never_fits_when_no_node_shape_holds_it_and_says_why():
    karpenter = fit.Karpenter(False, "NodePool t4-spot: its instances have at most 4 GPUs.", "")
    verdict = dry_run(Shape(1, 8), nodes(4, 4, gpus=4), karpenter=karpenter)
    assert verdict.code == fit.NEVER_FITS
    assert verdict.headline == "Never fits: the largest node of a100 has 4 GPUs; this asks 8 on one node."
    assert karpenter.words in verdict.reasons


def test_a_gang_larger_than_the_whole_pool_never_fits():
    verdict = dry_run(Shape(3, 4, gang=True), nodes(4, 4, gpus=4))
    assert verdict.code == fit.NEVER_FITS and "its gang needs 3 at once" in verdict.headline


def test_pods_that_are_no_gang_start_one_by_one_up_to_the_limit():
    verdict = dry_run(Shape(3, 2), nodes(8), project=standing(deserved=2, limit=4, fair_share=8))
    assert verdict.code == fit.WAITS_FOR_QUOTA and verdict.pods_now == 2
    assert "2 pods of 3 can start now" in verdict.headline


def test_a_limit_is_met_by_preempting_the_projects_own_lower_priority_work():
    # rnd-a runs a 4-GPU train pod at its 4-GPU limit; its build pod (priority 100) preempts it to stay within.
    running = [Running("runai-rnd-a", "train-1", "n0", D(4), 50, "rnd-a", "rnd")]
    project = standing(deserved=4, allocated=4, limit=4, fair_share=4)
    verdict = dry_run(Shape(1, 4, priority=100), nodes(4, gpus=8), running, project=project)
    assert verdict.code == fit.STARTS_NOW and verdict.cause == "preempt"
    assert [v.pod.name for v in verdict.room.victims] == ["train-1"]


def test_pods_that_are_no_gang_are_judged_one_by_one_by_the_quota_rules():
    # Two non-preemptible pods of 4: the first is already beyond the deserved quota (the scheduler's reason),
    # although the whole workload would also pass the limit.
    verdict = dry_run(Shape(2, 4, priority=100), nodes(8), project=standing(deserved=1, allocated=2, limit=7,
                                                                            fair_share=8))
    assert verdict.code == fit.WAITS_FOR_QUOTA and verdict.cause == "non_preemptible"
    # Within the limit for one pod, not for two: the first waits for room, the quota holds the second.
    capacity = dry_run(Shape(2, 8), nodes(0, 0), project=standing(deserved=0, limit=11, fair_share=16))
    assert capacity.code == fit.WAITS_FOR_CAPACITY and capacity.scheduler_outcome() == "capacity"
    assert any("Beyond the pods that fit its quota" in r for r in capacity.reasons)


def test_a_workload_that_never_fits_names_the_quota_rule_the_scheduler_checks_first():
    verdict = dry_run(Shape(1, 8), nodes(4, gpus=4), project=standing(deserved=2, limit=2, fair_share=2))
    assert verdict.code == fit.NEVER_FITS and verdict.quota_cause == "limit"
    assert verdict.scheduler_outcome() == "limit"
    assert any("Over its limit" in r for r in verdict.reasons)


def test_without_a_scheduler_enforcing_quota_only_nodes_decide():
    verdict = dry_run(Shape(1, 4), nodes(8), project=standing(deserved=0, limit=0), enforced=False)
    assert verdict.code == fit.STARTS_NOW


# ---------------------------------------------------------------------------------------------------
# Start estimates


def ending(name, project, node, gpus, soon, late, basis="usual", klass="train", priority=50):
    return Ending(name, project, "rnd", klass, (Running("ns", name, node, D(gpus), priority, project, "rnd"),),
                  soon, late, basis)


def test_usual_length_is_the_median_and_90th_percentile():
    assert fit.usual_length([60, 120, 180, 240, 300, 360, 420, 480, 540, 600]) == (300, 540)
    assert fit.usual_length([]) is None


def test_expected_ends_from_deadline_usual_length_and_overdue():
    assert fit.expected_end(running_for=600, deadline=3600, usual=None) == (0.0, 3000, "deadline")
    assert fit.expected_end(running_for=600, deadline=None, usual=(1200, 1800)) == (600, 1200, "usual")
    assert fit.expected_end(running_for=2000, deadline=None, usual=(1200, 1800)) == (0.0, 600, "overdue")
    assert fit.expected_end(running_for=600, deadline=1000, usual=(1200, 1800)) == (400, 400, "deadline")
    assert fit.expected_end(running_for=600, deadline=None, usual=None) == (None, None, "")


def test_estimate_when_two_jobs_of_another_project_end_at_their_usual_length():
    pool = nodes(0, gpus=8)
    endings = [ending("nlp-1", "team-nlp", "n0", 4, 40 * 60, 70 * 60), ending("nlp-2", "team-nlp", "n0", 4, 30 * 60, 60 * 60)]
    owners = owners_of(standing("team-nlp", allocated=8))
    target = Waiting("mine", "rnd-a", "rnd", Shape(1, 8))
    estimate = fit.estimate(target, nodes=pool, endings=endings, ahead=[], owners=owners, enforced=False)
    assert (estimate.earliest, estimate.latest) == (40 * 60, 70 * 60)
    assert estimate.text() == "in 40–70 min: 8 GPUs free when team-nlp's two train jobs end at their usual length"


def test_estimate_counts_the_workloads_ahead_in_the_queue():
    pool = nodes(0, gpus=8)
    endings = [ending("a", "team-nlp", "n0", 8, 10 * 60, 20 * 60)]
    ahead = [Waiting("first", "rnd-b", "rnd", Shape(1, 8), 30 * 60, 40 * 60)]
    target = Waiting("mine", "rnd-a", "rnd", Shape(1, 8))
    estimate = fit.estimate(target, nodes=pool, endings=endings, ahead=ahead, owners={}, enforced=False)
    # The one ahead takes the node when team-nlp's job ends, then runs its usual 30–40 minutes.
    assert (estimate.earliest, estimate.latest) == (40 * 60, 60 * 60)
    assert estimate.text().startswith("in 40–60 min: 1 workload ahead in the queue; 8 GPUs free when")


def test_estimate_by_deadline():
    endings = [ending("a", "team-nlp", "n0", 8, 0.0, 25 * 60, basis="deadline")]
    estimate = fit.estimate(Waiting("mine", "rnd-a", "rnd", Shape(1, 4)), nodes=nodes(0), endings=endings, ahead=[],
                            owners={}, enforced=False)
    assert estimate.short() == "in 0–25 min" and "ends by their deadline" in estimate.basis


def test_estimate_for_a_workload_over_its_limit_waits_for_its_own_project_to_end_work():
    pool = nodes(8, gpus=16)
    project = standing(deserved=2, allocated=4, limit=4, fair_share=8)
    endings = [ending("mine-1", "rnd-a", "n0", 4, 5 * 60, 15 * 60)]
    estimate = fit.estimate(Waiting("mine-2", "rnd-a", "rnd", Shape(1, 4)), nodes=pool, endings=endings, ahead=[],
                            owners=owners_of(project))
    assert (estimate.earliest, estimate.latest) == (5 * 60, 15 * 60)
    assert "rnd-a's train job ends" in estimate.basis


def test_a_workload_over_its_projects_deserved_quota_may_wait_for_in_quota_work_of_the_owners():
    # It borrows (deserved 0): in-quota work of the pool's owners may take the GPUs first, for as long as it runs.
    endings = [ending("a", "team-nlp", "n0", 8, 10 * 60, 20 * 60)]
    owners = owners_of(standing("rnd-a", deserved=0, allocated=0))
    target = Waiting("mine", "rnd-a", "rnd", Shape(1, 8))
    estimate = fit.estimate(target, nodes=nodes(0), endings=endings, ahead=[], owners=owners, reclaim_delay=15 * 60)
    assert (estimate.earliest, estimate.latest) == (10 * 60, 35 * 60)
    assert estimate.basis.endswith("over its project's deserved quota, so in-quota work of the pool's owners may come "
                                   "first (up to 15 min more)")
    # Within its deserved quota nothing comes first.
    within = fit.estimate(target, nodes=nodes(0), endings=endings, ahead=[], reclaim_delay=15 * 60,
                          owners=owners_of(standing("rnd-a", deserved=8, allocated=0)))
    assert (within.earliest, within.latest) == (10 * 60, 20 * 60)


def test_no_estimate_when_what_it_waits_for_has_no_deadline_and_no_history():
    endings = [ending("a", "team-nlp", "n0", 8, None, None, basis="")]
    estimate = fit.estimate(Waiting("mine", "rnd-a", "rnd", Shape(1, 8)), nodes=nodes(0), endings=endings, ahead=[],
                            owners={}, enforced=False)
    assert not estimate.known
    assert "team-nlp's train job" in estimate.basis and "activeDeadlineSeconds" in estimate.basis


def test_no_estimate_for_a_workload_that_never_fits():
    verdict = dry_run(Shape(1, 8), nodes(4, gpus=4))
    estimate = fit.estimate(Waiting("big", "rnd-a", "rnd", Shape(1, 8)), nodes=nodes(4, gpus=4), endings=[], ahead=[],
                            owners={}, verdict_now=verdict)
    assert not estimate.known and "largest node of a100 has 4 GPUs" in estimate.basis


def test_a_workload_the_scheduler_makes_room_for_is_estimated_within_a_minute():
    verdict = dry_run(Shape(1, 4), nodes(4, gpus=4))
    estimate = fit.estimate(Waiting("w", "rnd-a", "rnd", Shape(1, 4)), nodes=nodes(4, gpus=4), endings=[], ahead=[],
                            owners={}, verdict_now=verdict)
    assert estimate.short() == "within a minute"


@pytest.mark.parametrize("seconds,text", [((0, 50), "within a minute"), ((240, 300), "in 4–5 min"),
                                          ((300, 300), "in about 5 min"), ((3 * 3600, 5 * 3600), "in 3–5 h")])
def test_spans_in_words(seconds, text):
    assert fit.span(*seconds) == text


# ---------------------------------------------------------------------------------------------------
# Shared GPUs in their own units, words that agree with their numbers (issue 30, point 6)

SHARE = D("0.429")  # one 3g.40gb slice of an A100


def test_words_agree_with_their_numbers_and_print_no_trailing_zeros():
    verdict = dry_run(Shape(1, 1), nodes(1, gpus=4))
    assert verdict.headline == "Starts now: 1 pod of 1 GPU fits on the free GPUs of a100."
    assert verdict.reasons == ["1 GPU is free on 1 Ready node; the most free on one node is 1, so 1 pod of 1 GPU "
                               "fits now."]
    never = dry_run(Shape(1, 8), [NodeRoom("n0", D("4.000"), D("4.000"))])
    assert never.headline == "Never fits: the largest node of a100 has 4 GPUs; this asks 8 on one node."
    assert fit.Shape(3, 1, profile="3g.40gb", slices=2).unit == "2 3g.40gb slices"
    assert fit.Shape(1, 0, fraction=D("0.5")).words() == "1 pod of 0.5 GPUs (a share of one GPU)"


def test_slices_of_one_profile_serve_only_pods_asking_it():
    # n0 has 3 free 3g.40gb slices and 7 free 1g.10gb (a whole GPU's worth); n1 is all whole GPUs, 1 free.
    mig = NodeRoom("n0", D(3), D("2.287"), slices=(("1g.10gb", 7, 7, D("0.143")), ("3g.40gb", 4, 3, SHARE)))
    whole = NodeRoom("n1", 4, D(1))
    four = Shape(1, 4 * SHARE, profile="3g.40gb", slices=4)
    assert dry_run(four, [mig, whole]).code == fit.WAITS_FOR_CAPACITY  # 2.287 GPU-equivalents free, 3 slices
    assert dry_run(Shape(1, 3 * SHARE, profile="3g.40gb", slices=3), [mig, whole]).code == fit.STARTS_NOW
    # No node of 8 slices; no whole GPU on the MIG node: one pod of 2 whole GPUs never fits on n0.
    assert dry_run(replace_shape(four, slices=8), [mig, whole]).headline == (
        "Never fits: the largest node of a100 has 4 3g.40gb slices; this asks 8 on one node.")
    assert fit.slots_on(fit.in_units(Shape(1, 2), [mig])[0][0], 2) == 0
    frag = fit.fragmentation([mig, whole])
    assert frag.free == D("3.287") and frag.slots[1] == 1  # the GPU-equivalents are counted, one whole GPU fits
    assert [(m.profile, m.free, m.largest_free) for m in frag.mig] == [("1g.10gb", 7, 7), ("3g.40gb", 3, 3)]


def test_a_fraction_needs_that_much_share_on_one_gpu():
    # Two GPUs shared by fractions with 0.5 and 0.25 free, no whole GPU free: 0.75 free in all.
    node = NodeRoom("n0", 4, D("0.75"), shared=(D("0.5"), D("0.25")))
    assert dry_run(Shape(1, D("0.5"), fraction=D("0.5")), [node]).code == fit.STARTS_NOW
    assert dry_run(Shape(1, D("0.75"), fraction=D("0.75")), [node]).code == fit.WAITS_FOR_CAPACITY
    assert fit.slots_on(fit.in_units(Shape(1, D("0.25"), fraction=D("0.25")), [node])[0][0], 1) == 3


def replace_shape(shape, **values):
    from dataclasses import replace

    return replace(shape, **values)


def test_one_free_gpu_is_one_gpu_not_gpus():
    assert fit.fragmentation(nodes(1, 0)).line() == "1 GPU free: 0×8 · 0×4 · 0×2 · 1×1"
    assert fit.fragmentation(nodes(0, 0)).line() == "0 GPUs free: 0×8 · 0×4 · 0×2 · 0×1"
