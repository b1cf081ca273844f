"""Fair share of a pool's GPUs (docs/concepts.md#over-quota): deserved first by rank, then idle GPUs by weight."""
from decimal import Decimal as D

from projects.fairshare import Claim, fair_shares, hierarchical_fair_shares


def test_everyone_gets_deserved_when_the_pool_is_large_enough_and_idle_splits_by_weight():
    # 10 GPUs, deserved 2 + 4 = 6, idle 4 split 1:3 by weight; both want everything.
    shares = fair_shares(D(10), [Claim("a", D(2), weight=1), Claim("b", D(4), weight=3)])
    assert shares == {"a": D("3.000"), "b": D("7.000")}


def test_fair_share_never_exceeds_what_is_requested_and_the_rest_goes_to_the_others():
    # a asks for only 3: it takes 3 and b gets the remaining idle GPUs (water-filling).
    shares = fair_shares(D(10), [Claim("a", D(2), requested=D(3), weight=1),
                                 Claim("b", D(2), requested=None, weight=1)])
    assert shares == {"a": D("3.000"), "b": D("7.000")}


def test_limit_caps_the_fair_share():
    shares = fair_shares(D(10), [Claim("a", D(2), limit=D(4)), Claim("b", D(2))])
    assert shares == {"a": D("4.000"), "b": D("6.000")}


def test_nothing_requested_means_no_fair_share_even_with_deserved_quota():
    shares = fair_shares(D(8), [Claim("idle", D(4), requested=D(0)), Claim("busy", D(4), requested=D(8))])
    assert shares == {"idle": D("0.000"), "busy": D("8.000")}


def test_higher_rank_gets_idle_capacity_first():
    # Both deserve 2; the High one takes all 6 idle GPUs before Medium low sees any.
    shares = fair_shares(D(10), [Claim("high", D(2), rank=6), Claim("low", D(2), rank=3)])
    assert shares == {"high": D("8.000"), "low": D("2.000")}


def test_higher_rank_gets_deserved_first_when_the_pool_is_oversubscribed():
    # 6 GPUs for 4 + 4 deserved: High gets its 4, Medium low the 2 left.
    shares = fair_shares(D(6), [Claim("high", D(4), rank=6), Claim("low", D(4), rank=3)])
    assert shares == {"high": D("4.000"), "low": D("2.000")}


def test_oversubscribed_rank_shares_in_proportion_to_deserved():
    shares = fair_shares(D(6), [Claim("a", D(6)), Claim("b", D(3))])
    assert shares == {"a": D("4.000"), "b": D("2.000")}


def test_zero_weight_gets_no_over_quota():
    shares = fair_shares(D(10), [Claim("a", D(2), weight=0), Claim("b", D(2), weight=2)])
    assert shares == {"a": D("2.000"), "b": D("8.000")}


def test_idle_left_by_a_higher_rank_goes_down_to_the_next_rank():
    shares = fair_shares(D(10), [Claim("high", D(1), requested=D(3), rank=7), Claim("low", D(1), rank=1)])
    assert shares == {"high": D("3.000"), "low": D("7.000")}


def test_fractions_are_kept_to_a_thousandth():
    shares = fair_shares(D(10), [Claim(k, D(0)) for k in "abc"])
    assert shares == {k: D("3.333") for k in "abc"}


def test_empty_pool_and_no_claims():
    assert fair_shares(D(0), [Claim("a", D(4))]) == {"a": D("0.000")}
    assert fair_shares(D(5), []) == {}


def test_departments_are_balanced_first_then_their_projects():
    # Pool of 12: rnd deserves 8, ops 4. rnd's projects ask for 20 in all, ops' for 1: ops takes 1,
    # rnd gets the 11 left; inside rnd, p1 (deserved 6) and p2 (deserved 2) share 11 → 6+1.5, 2+1.5.
    rnd = Claim(("department", 1), D(8), children=(
        Claim(("project", 1), D(6), requested=D(10)), Claim(("project", 2), D(2), requested=D(10))))
    ops = Claim(("department", 2), D(4), children=(Claim(("project", 3), D(4), requested=D(1)),))
    shares = hierarchical_fair_shares(D(12), [rnd, ops])
    assert shares[("department", 1)] == D("11.000")
    assert shares[("department", 2)] == D("1.000")
    assert shares[("project", 1)] == D("7.500")
    assert shares[("project", 2)] == D("3.500")
    assert shares[("project", 3)] == D("1.000")


def test_simple_formula_holds_when_nobody_is_capped():
    # OQ = w / Σw × idle: 20 GPUs, deserved 4 + 6, idle 10 split 2:3 → 4+4, 6+6.
    shares = fair_shares(D(20), [Claim("a", D(4), weight=2), Claim("b", D(6), weight=3)])
    assert shares == {"a": D("8.000"), "b": D("12.000")}
