"""The demo shows a statement of the current month from the moment it starts: thirty days of ledger
history consistent with its organisation, and rates for its V100, A100, H100 and T4 models."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal
from io import StringIO

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.utils import timezone

from ledger.models import LedgerEntry, LedgerState, Rate
from ledger.selectors import Month, department_statement
from projects.models import Department
from tests.pages import csv_of, page_text


@pytest.mark.django_db
def test_the_demo_has_a_statement_of_the_current_month_and_rates_for_its_gpus(client):
    out = StringIO()
    call_command("demo", stdout=out)
    assert "GPU-hours ledger: thirty days of history" in out.getvalue()
    assert {m.split("-")[1] for m in Rate.objects.values_list("gpu_model", flat=True)} >= {"V100", "A100", "H100", "T4"}
    state = LedgerState.objects.get()
    assert state.closed_until - state.started == dt.timedelta(days=30)
    assert state.closed_until > timezone.now()  # through the current hour: the month has hours at once
    rnd = Department.objects.get(name="rnd")
    manager = get_user_model().objects.get(username="rnd-manager")
    client.force_login(manager)
    page = client.get(client.get("/").url)  # where the department manager lands
    assert f"/departments/{rnd.pk}/statement/" in page.content.decode()
    statement = client.get(f"/departments/{rnd.pk}/statement/").context["statement"]
    assert statement.month == Month.parse(None) and statement.lines and statement.totals["cost"] > 0
    # Projects by their display names, the Kubernetes name beside (the demo names them as people do).
    assert {line.labels["project"] for line in statement.lines} <= {"Vision (team-vision)", "NLP (team-nlp)",
                                                                     "Speech (team-speech)", "Robotics (team-robotics)"}
    assert statement.title.startswith("Department R&D (rnd), ")
    shown = page_text(client.get(f"/departments/{rnd.pk}/statement/"))
    assert "Department R&D rnd of cluster demo" in shown and "NLP team-nlp" not in shown and "NLP (team-nlp)" in shown
    rows = csv_of(client.get(f"/departments/{rnd.pk}/statement/", {"format": "csv"}))
    assert "NLP (team-nlp)" in {row[0] for row in rows}
    # The department page says R&D, its Kubernetes name beside.
    assert "Department R&D rnd" in page_text(client.get(f"/departments/{rnd.pk}/"))
    # The organisation's story: team-nlp holds its GPUs idle, team-speech builds (non-preemptible).
    thirty = department_statement(user=manager, department=rnd, month=statement.month)
    nlp = [l for l in thirty.lines if l.labels["project"] == "NLP (team-nlp)"]
    assert all(l.idle_hours > l.gpu_hours * Decimal("0.9") for l in nlp)
    speech = [l for l in thirty.lines if l.labels["project"] == "Speech (team-speech)"]
    assert all(l.non_preemptible_hours == l.gpu_hours for l in speech)
    # Idempotent: running the demo again adds no history.
    rows = LedgerEntry.objects.count()
    call_command("demo", stdout=StringIO())
    assert LedgerEntry.objects.count() == rows
