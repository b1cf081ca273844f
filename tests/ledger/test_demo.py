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
    assert {line.labels["project"] for line in statement.lines} <= {"team-vision", "team-nlp", "team-speech",
                                                                     "team-robotics"}
    # The organisation's story: team-nlp holds its GPUs idle, team-speech builds (non-preemptible).
    thirty = department_statement(user=manager, department=rnd, month=statement.month)
    nlp = [l for l in thirty.lines if l.labels["project"] == "team-nlp"]
    assert all(l.idle_hours > l.gpu_hours * Decimal("0.9") for l in nlp)
    speech = [l for l in thirty.lines if l.labels["project"] == "team-speech"]
    assert all(l.non_preemptible_hours == l.gpu_hours for l in speech)
    # Idempotent: running the demo again adds no history.
    rows = LedgerEntry.objects.count()
    call_command("demo", stdout=StringIO())
    assert LedgerEntry.objects.count() == rows
