"""GPU-hours and money follow the shares: a MIG slice, a replica of a time-sliced GPU and a KAI fraction are
recorded in their own unit (slice-hours of their profile, replica-hours, GPU-equivalent-hours), priced per
unit — a MIG profile's own rate, else the GPU model's × the slice's share — and a department's statement
(page, CSV, API) shows each line's unit, quantity and rate; totals keep their meaning (GPU-equivalent hours,
the sum of the lines' costs)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from ledger import services
from ledger.models import LedgerDay, LedgerEntry
from nodepools.models import Pod, PodLifetime
from tests.ledger.test_closing import rfc, timed
from tests.pages import csv_of

UTC = dt.timezone.utc
MARCH = dt.datetime(2026, 3, 14, 0, tzinfo=UTC)
A100_80 = "NVIDIA-A100-SXM4-80GB"
A100_40 = "NVIDIA-A100-SXM4-40GB"
HOURS = 2


def shared_pod(org, name, project, node, *, requests=None, annotations=None, hours=HOURS):
    from kubesim import make_pod

    start = MARCH
    pod = make_pod(name, f"runai-{project.name}", node=node, priority=50, phase="Running",
                   created=rfc(start - dt.timedelta(seconds=5)), annotations=annotations,
                   containers=[{"name": "main", "requests": {"cpu": "1", "memory": "1Gi", **(requests or {})}}])
    pod["metadata"]["uid"] = f"uid-{name}"
    org.pods.append(timed(pod, start, start + dt.timedelta(hours=hours)))


@pytest.fixture
def shares(org):
    """In pool a100, for 2 hours of 14 March 2026: rnd-a holds 2 × 1g.10gb and 1 × 3g.40gb of a MIG-mixed
    A100 80GB (all-balanced); rnd-b 1 slice of a MIG-single node (all-1g.10gb) and 1 replica of an A100 80GB
    time-sliced 4 ways; ops-a a KAI gpu-fraction of 0.5 on an A100 40GB."""
    from kubesim import make_node

    a100 = {"gpu-type": "A100"}
    org.nodes += [
        make_node("mig-mixed", gpus=1, gpu_product=A100_80, mig_config="all-balanced", labels=a100),
        make_node("mig-single", gpus=1, gpu_product=A100_80, mig_config="all-1g.10gb", mig_strategy="single",
                  labels=a100),
        make_node("sliced", gpus=1, gpu_product=A100_80, gpu_replicas=4, labels=a100),
    ]
    shared_pod(org, "embed", org.rnd_a, "mig-mixed", requests={"nvidia.com/mig-1g.10gb": 2})
    shared_pod(org, "chat", org.rnd_a, "mig-mixed", requests={"nvidia.com/mig-3g.40gb": 1})
    shared_pod(org, "tiny", org.rnd_b, "mig-single", requests={"nvidia.com/gpu": 1})
    shared_pod(org, "notebook", org.rnd_b, "sliced", requests={"nvidia.com/gpu": 1})
    shared_pod(org, "half", org.ops_a, "a100-1", annotations={"gpu-fraction": "0.5"})
    org.load()
    for h in range(HOURS):
        services.ledger_hour_close(cluster=org.cluster, hour=MARCH + dt.timedelta(hours=h))
    return org


def _rates(*, profile_rate: bool = True):
    services.rate_create(actor=None, gpu_model=A100_80, currency="EUR", valid_from=dt.date(2026, 1, 1),
                         gpu_hour=Decimal(7))
    services.rate_create(actor=None, gpu_model=A100_40, currency="EUR", valid_from=dt.date(2026, 1, 1),
                         gpu_hour=Decimal(2))
    if profile_rate:
        services.rate_create(actor=None, gpu_model=A100_80, mig_profile="1g.10gb", currency="EUR",
                             valid_from=dt.date(2026, 1, 1), gpu_hour=Decimal("1.5"))


def test_each_pod_is_billed_in_the_unit_its_node_gives_it(shares):
    pods = {p.name: (p.gpu_unit, p.gpu_units, p.gpus) for p in Pod.objects.filter(name__in=[
        "embed", "chat", "tiny", "notebook", "half"])}
    assert pods == {
        "embed": ("1g.10gb", Decimal("2.000"), Decimal("0.286")),
        "chat": ("3g.40gb", Decimal("1.000"), Decimal("0.429")),
        "tiny": ("1g.10gb", Decimal("1.000"), Decimal("0.143")),
        "notebook": ("replica:4", Decimal("1.000"), Decimal("0.250")),
        "half": ("fraction", Decimal("0.500"), Decimal("0.500")),
    }
    lifetimes = {l.name: (l.gpu_unit, l.gpu_units) for l in PodLifetime.objects.filter(name__in=pods)}
    assert lifetimes == {name: unit[:2] for name, unit in pods.items()}


def test_the_ledger_records_gpu_equivalent_and_unit_hours_per_profile_and_fraction(shares):
    org = shares
    entries = {(e.project_id, e.gpu_model, e.gpu_unit): e for e in LedgerEntry.objects.filter(hour=MARCH)}
    embed = entries[(org.rnd_a.pk, A100_80, "1g.10gb")]
    assert (embed.unit_seconds, embed.gpu_seconds) == (Decimal(2 * 3600), Decimal("0.286") * 3600)
    chat = entries[(org.rnd_a.pk, A100_80, "3g.40gb")]
    assert (chat.unit_seconds, chat.gpu_seconds) == (Decimal(3600), Decimal("0.429") * 3600)
    tiny = entries[(org.rnd_b.pk, A100_80, "1g.10gb")]
    assert tiny.unit_seconds == Decimal(3600)
    notebook = entries[(org.rnd_b.pk, A100_80, "replica:4")]
    assert (notebook.unit_seconds, notebook.gpu_seconds) == (Decimal(3600), Decimal(900))
    half = entries[(org.ops_a.pk, A100_40, "fraction")]
    assert (half.unit_seconds, half.gpu_seconds) == (Decimal(1800), Decimal(1800))
    # The days keep the units apart too, closings summed over the two hours.
    day = LedgerDay.objects.get(project_id=org.rnd_a.pk, gpu_unit="1g.10gb")
    assert day.unit_seconds == Decimal(2 * 2 * 3600)


def test_a_department_statement_shows_each_line_s_unit_quantity_and_rate(shares, users, client):
    org = shares
    _rates()
    client.force_login(users["rnd_viewer"])
    page = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"})
    assert page.status_code == 200
    lines = {(l.labels["project"], l.unit_label): l for l in page.context["statement"].lines}
    assert set(lines) == {("rnd-a", "MIG 1g.10gb"), ("rnd-a", "MIG 3g.40gb"), ("rnd-b", "MIG 1g.10gb"),
                          ("rnd-b", "replica (1/4 GPU)")}
    embed = lines[("rnd-a", "MIG 1g.10gb")]
    # The profile's own rate: 2 slices × 2 h at 1.5 per slice-hour.
    assert (embed.quantity, embed.quantity_label, embed.rate, embed.rate_derived, embed.cost) == (
        Decimal("4.00"), "slice-hours", Decimal("1.5000"), False, Decimal("6.00"))
    # No rate of 3g.40gb's own: the A100 80GB's 7 per GPU-hour × 3/7 = 3 per slice-hour.
    chat = lines[("rnd-a", "MIG 3g.40gb")]
    assert (chat.quantity, chat.rate, chat.rate_derived, chat.cost) == (
        Decimal("2.00"), Decimal("3.0000"), True, Decimal("6.00"))
    notebook = lines[("rnd-b", "replica (1/4 GPU)")]
    assert (notebook.quantity, notebook.quantity_label, notebook.rate, notebook.cost) == (
        Decimal("2.00"), "replica-hours", Decimal("1.7500"), Decimal("3.50"))
    tiny = lines[("rnd-b", "MIG 1g.10gb")]
    assert (tiny.quantity, tiny.rate, tiny.cost) == (Decimal("2.00"), Decimal("1.5000"), Decimal("3.00"))
    totals = page.context["statement"].totals
    # Totals: GPU-equivalent hours (0.286 + 0.429 + 0.143 + 0.25 GPUs × 2 h) and the lines' costs.
    assert totals["gpu_hours"] == sum((l.gpu_hours for l in lines.values()), Decimal(0)) == Decimal("2.22")
    assert totals["cost"] == Decimal("18.50")
    html = page.content.decode()
    for text in ("MIG 1g.10gb", "MIG 3g.40gb", "replica (1/4 GPU)", "4.00 slice-hours", "1.5000 per slice-hour",
                 "3.0000 per slice-hour", "(model × share)", "1.7500 per replica-hour"):
        assert text in html


def test_without_a_profile_rate_a_slice_costs_the_model_s_price_times_its_share(shares, users, client):
    org = shares
    _rates(profile_rate=False)
    client.force_login(users["rnd_viewer"])
    lines = {(l.labels["project"], l.unit_label): l for l in client.get(
        f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"}).context["statement"].lines}
    embed = lines[("rnd-a", "MIG 1g.10gb")]
    assert (embed.rate, embed.rate_derived, embed.cost) == (Decimal("1.0000"), True, Decimal("4.00"))  # 7 × 1/7


def test_the_statement_csv_and_api_carry_unit_quantity_and_rate(shares, users, client):
    org = shares
    _rates()
    client.force_login(users["rnd_viewer"])
    rows = csv_of(client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03", "format": "csv"}))
    header = rows[0]
    unit, quantity, counted, rate = (header.index(h) for h in (
        "Unit", "Quantity", "Quantity counted in", "Rate (per unit-hour)"))
    assert sorted((r[0], r[unit], r[quantity], r[counted], r[rate]) for r in rows[1:-1]) == [
        ("rnd-a", "MIG 1g.10gb", "4.00", "slice-hours", "1.5000"),
        ("rnd-a", "MIG 3g.40gb", "2.00", "slice-hours", "3.0000"),
        ("rnd-b", "MIG 1g.10gb", "2.00", "slice-hours", "1.5000"),
        ("rnd-b", "replica (1/4 GPU)", "2.00", "replica-hours", "1.7500"),
    ]
    cost = header.index("Cost")
    assert rows[-1][0] == "Total" and rows[-1][cost] == "18.50"
    api = client.get(f"/api/v1/departments/{org.rnd.pk}/statement", {"month": "2026-03"}).json()
    got = sorted((l["project"], l["unit"], l["unit_label"], l["quantity"], l["quantity_unit"], l["rate"],
                  l["rate_derived"]) for l in api["lines"])
    assert got == [
        ("rnd-a", "1g.10gb", "MIG 1g.10gb", "4.00", "slice-hours", "1.5000", False),
        ("rnd-a", "3g.40gb", "MIG 3g.40gb", "2.00", "slice-hours", "3.0000", True),
        ("rnd-b", "1g.10gb", "MIG 1g.10gb", "2.00", "slice-hours", "1.5000", False),
        ("rnd-b", "replica:4", "replica (1/4 GPU)", "2.00", "replica-hours", "1.7500", True),
    ]
    assert api["totals"]["cost"] == "18.50"


def test_a_fraction_is_billed_in_gpu_equivalent_hours_at_the_model_s_rate(shares, users, client):
    org = shares
    _rates()
    client.force_login(users["sysadmin"])
    api = client.get(f"/api/v1/departments/{org.ops.pk}/statement", {"month": "2026-03"}).json()
    half = [l for l in api["lines"] if l["unit"] == "fraction"]
    assert len(half) == 1
    assert (half[0]["unit_label"], half[0]["quantity"], half[0]["quantity_unit"], half[0]["rate"],
            half[0]["cost"]) == ("GPU-equivalent", "1.00", "GPU-equivalent-hours", "2.0000", "2.00")  # 0.5 × 2 h at 2


def test_whole_gpus_keep_their_lines_and_unit(org, users, client):
    from tests.ledger.test_closing import run

    run(org, "train", org.rnd_a, "a100-1", MARCH, MARCH + dt.timedelta(hours=1), gpus=2)
    services.ledger_hour_close(cluster=org.cluster, hour=MARCH)
    _rates(profile_rate=False)
    entry = LedgerEntry.objects.get(project_id=org.rnd_a.pk)
    assert (entry.gpu_unit, entry.unit_seconds, entry.gpu_seconds) == ("", Decimal(7200), Decimal(7200))
    client.force_login(users["rnd_viewer"])
    line, = client.get(f"/departments/{org.rnd.pk}/statement/", {"month": "2026-03"}).context["statement"].lines
    assert (line.unit_label, line.quantity, line.quantity_label, line.rate, line.cost) == (
        "GPU", Decimal("2.00"), "GPU-hours", Decimal("2.0000"), Decimal("4.00"))


def test_a_profile_rate_names_the_field_it_refuses(db):
    for profile, words in (("1x.10gb", "is not a MIG profile"), ("mig-1g.10gb", "is not a MIG profile"),
                           ("8g.80gb", "has 7 compute slices")):
        with pytest.raises(ValidationError) as caught:
            services.rate_create(actor=None, gpu_model=A100_80, mig_profile=profile, currency="EUR",
                                 valid_from=dt.date(2026, 1, 1), gpu_hour=Decimal(1))
        assert list(caught.value.message_dict) == ["mig_profile"] and words in caught.value.message_dict["mig_profile"][0]
    services.rate_create(actor=None, gpu_model=A100_80, mig_profile=" 1G.10GB ", currency="EUR",
                         valid_from=dt.date(2026, 1, 1), gpu_hour=Decimal(1))
    with pytest.raises(ValidationError) as caught:
        services.rate_create(actor=None, gpu_model=A100_80, mig_profile="1g.10gb", currency="EUR",
                             valid_from=dt.date(2026, 1, 1), gpu_hour=Decimal(2))
    assert "MIG 1g.10gb already has a rate" in caught.value.message_dict["valid_from"][0]
    # The whole GPU's rate of the same model and day is another rate.
    services.rate_create(actor=None, gpu_model=A100_80, currency="EUR", valid_from=dt.date(2026, 1, 1),
                         gpu_hour=Decimal(7))


def test_a_profile_rate_is_set_on_the_rates_page_and_api(org, users, client):
    client.force_login(users["sysadmin"])
    api = client.post("/api/v1/rates/", {"gpu_model": A100_80, "mig_profile": "2g.20gb", "currency": "EUR",
                                          "valid_from": "2026-01-01", "gpu_hour": "2.5"}, content_type="application/json")
    assert api.status_code == 201, api.content
    assert api.json()["mig_profile"] == "2g.20gb"
    bad = client.post("/api/v1/rates/", {"gpu_model": A100_80, "mig_profile": "big", "currency": "EUR",
                                          "valid_from": "2026-01-01", "gpu_hour": "2.5"}, content_type="application/json")
    assert bad.status_code == 400 and "mig_profile" in bad.json()["errors"]
    page = client.post("/rates/new/", {"gpu_model": A100_80, "mig_profile": "9g.90gb", "currency": "EUR",
                                       "valid_from": "2026-01-02", "gpu_hour": "1"})
    assert page.status_code == 200 and "has 7 compute slices" in page.content.decode()
    listing = client.get("/rates/").content.decode()
    assert "2g.20gb" in listing and "per slice-hour" in listing


def test_hour_rows_keep_units_apart_and_over_quota_follows_each_unit():
    from ledger.compute import Deserved, Interval, hour_rows, unit_price

    h = 1_773_000_000 - 1_773_000_000 % 3600

    def pod(name, gpus, unit, units, start):
        return Interval(name, "ns", name, 10, A100_80, 1, Decimal(gpus), 0, 0, True, start, None, unit,
                        None if units is None else Decimal(units))

    rows = hour_rows(h, [pod("whole", "1", "", None, h - 100), pod("slices", "0.286", "1g.10gb", "2", h),
                         pod("late", "0.429", "3g.40gb", "1", h + 1800)],
                     Deserved(default=lambda pool, project: Decimal(1)))
    assert set(rows) == {(10, A100_80, 1), (10, A100_80, 1, "1g.10gb"), (10, A100_80, 1, "3g.40gb")}
    assert rows[(10, A100_80, 1, "1g.10gb")].unit_seconds == Decimal(7200)
    assert rows[(10, A100_80, 1)].unit_seconds == Decimal(3600)
    # A quota of 1 GPU: the whole GPU (earliest) fills it, the slices lie above it, each in its own unit.
    assert rows[(10, A100_80, 1, "1g.10gb")].over_quota_gpu_seconds == Decimal("0.286") * 3600
    assert rows[(10, A100_80, 1, "3g.40gb")].over_quota_gpu_seconds == Decimal("0.429") * 1800
    assert rows[(10, A100_80, 1)].over_quota_gpu_seconds == 0
    # Prices per unit-hour: a profile's own, else the model's × the share; a replica the model's / n.
    assert unit_price("1g.10gb", A100_80, Decimal(7), Decimal("1.2")) == (Decimal("1.2"), False)
    assert unit_price("3g.40gb", A100_80, Decimal(7)) == (Decimal(3), True)
    assert unit_price("1g.6gb", "NVIDIA-A30", Decimal(2)) == (Decimal("0.5"), True)  # 1/4 of an A30
    assert unit_price("replica:4", A100_80, Decimal(7)) == (Decimal("1.75"), True)
    assert unit_price("fraction", A100_80, Decimal(7)) == (Decimal(7), False)
    assert unit_price("1g.10gb", A100_80, None) == (None, False)


def test_the_hourly_ledger_csv_and_api_carry_each_row_s_unit(shares, users, client):
    org = shares
    client.force_login(users["sysadmin"])
    rows = csv_of(client.get("/ledger/export.csv", {"date_from": "2026-03-14", "date_to": "2026-03-14"}))
    header = rows[0]
    assert header[-2:] == ["Unit", "Unit-hours"]
    got = sorted((r[header.index("Project")], r[header.index("Unit")], r[header.index("Unit-hours")],
                  r[header.index("GPU-hours")]) for r in rows[1:] if r[header.index("Hour (UTC)")] == "2026-03-14T00:00:00Z")
    assert got == [("ops-a", "GPU-equivalent", "0.5000", "0.5000"), ("rnd-a", "MIG 1g.10gb", "2.0000", "0.2860"),
                   ("rnd-a", "MIG 3g.40gb", "1.0000", "0.4290"), ("rnd-b", "MIG 1g.10gb", "1.0000", "0.1430"),
                   ("rnd-b", "replica (1/4 GPU)", "1.0000", "0.2500")]
    api = client.get("/api/v1/ledger-entries/", {"project": org.rnd_a.pk}).json()
    units = sorted((e["gpu_unit"], e["unit_seconds"]) for e in api["results"] if e["hour"].startswith("2026-03-14T00"))
    assert units == [("1g.10gb", "7200.000"), ("3g.40gb", "3600.000")]
