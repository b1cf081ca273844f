"""Every filter of every list: generated values, as each demo role, never a 5xx (issue: edge values).

The lists are found, not listed: every address of the console that takes no argument is fetched once as
a system administrator, and each one that builds a FilterSet (a page, its CSV, a compliance export, an
API list or export) is a target with that FilterSet's parameters; each page is also asked for its CSV
(`format=csv`). A new list page or filter is covered as it is written.

Values: the calendar's ends (0001-01-01, 9999-12-31) and dates beyond them, dates not written
YYYY-MM-DD, full-width and other unicode digits, numbers past a float and below its precision, NaN and
infinities, empty and repeated parameters, ids past 64 bits, unknown parameters, the lists' own
parameters (page, sort, ordering, page_size, columns) with nonsense.

First a sweep: each target as each role with every filter at an edge at once; then Hypothesis draws
targets, roles and queries. `CONSOLE_FUZZ_EXAMPLES` sets the number of drawn examples (default 150, or
the active Hypothesis profile's when HYPOTHESIS_PROFILE is set).
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import os
from decimal import Decimal

import django_filters
import pytest
from django.test import Client
from django.urls import NoReverseMatch, get_resolver, reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from common import fields as strict

pytestmark = pytest.mark.django_db

SKIP_NAMES = {"logout", "metrics", "healthz", "readyz", "api-schema", "api-docs", "favicon", "oidc-login",
              "oidc-callback", "login"}
UTC = dt.timezone.utc


def _examples() -> int:
    if os.environ.get("CONSOLE_FUZZ_EXAMPLES"):
        return int(os.environ["CONSOLE_FUZZ_EXAMPLES"])
    if os.environ.get("HYPOTHESIS_PROFILE"):
        return settings.default.max_examples
    return 150


@dataclasses.dataclass(frozen=True)
class Target:
    path: str
    params: tuple[tuple[str, str], ...]  # (parameter, kind)
    extra: tuple[tuple[str, str], ...] = ()  # fixed parameters (format=csv)

    def __str__(self) -> str:
        return self.path + ("?" + "&".join(f"{k}={v}" for k, v in self.extra) if self.extra else "")


def _kind(filter_) -> str:
    field_class = filter_.field_class
    if isinstance(filter_, (django_filters.ModelMultipleChoiceFilter, django_filters.ModelChoiceFilter)):
        return "id"
    if isinstance(filter_, (django_filters.MultipleChoiceFilter, django_filters.ChoiceFilter)):
        return "choice"
    if issubclass(field_class, strict.StrictIsoDateTimeRangeField) or "range" in field_class.__name__.lower():
        return "time"
    if issubclass(field_class, strict.StrictDateFormField) or "date" in field_class.__name__.lower():
        return "date"
    if "decimal" in field_class.__name__.lower() or "integer" in field_class.__name__.lower():
        return "number"
    if "boolean" in field_class.__name__.lower() or "yesno" in type(filter_).__name__.lower():
        return "bool"
    return "text"


def _params(filterset_class) -> tuple[tuple[str, str], ...]:
    params = []
    for name, filter_ in filterset_class.base_filters.items():
        kind = _kind(filter_)
        if kind == "time":
            params += [(f"{name}_after", "time"), (f"{name}_before", "time")]
        else:
            params.append((name, kind))
    return tuple(params)


def _plain_addresses() -> list[str]:
    """Every named address of the console that takes no argument (the API's namespace too)."""
    resolver = get_resolver()
    names = [name for name in resolver.reverse_dict if isinstance(name, str)]
    names += [f"api:{name}" for name in resolver.namespace_dict["api"][1].reverse_dict if isinstance(name, str)]
    paths = set()
    for name in names:
        if name.split(":")[-1] in SKIP_NAMES:
            continue
        try:
            paths.add(reverse(name))
        except NoReverseMatch:
            continue
    return sorted(paths)


def discover(client: Client, monkeypatch) -> list[Target]:
    built: list[type] = []
    original = django_filters.FilterSet.__init__

    def recording(self, *args, **kwargs):
        built.append(type(self))
        original(self, *args, **kwargs)

    monkeypatch.setattr(django_filters.FilterSet, "__init__", recording)
    targets = []
    for path in _plain_addresses():
        built.clear()
        response = client.get(path)
        assert response.status_code < 500, path
        for filterset_class in dict.fromkeys(built):
            params = _params(filterset_class)
            targets.append(Target(path, params))
            if not path.startswith("/api/") and not path.endswith(".csv"):
                targets.append(Target(path, params, (("format", "csv"),)))
    monkeypatch.setattr(django_filters.FilterSet, "__init__", original)
    return targets


# --- Values ---------------------------------------------------------------------------------------------

EDGE_DATES = ["0001-01-01", "9999-12-31", "9999-12-30", "0000-01-01", "10000-01-01", "2024-02-29", "2026-02-29",
              "２０２６-１１-２０", "٢٠٢٦-١١-٢٠", "20261120", "2026-1-1", "11/20/2026", "2026-11-20T00:00", "1e309", "",
              " ", "abc", "-1"]
EDGE_TIMES = ["0001-01-01T00:00:00+23:59", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59",
              "9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59", "２０２６-１１-２０T00:00:00Z", "2026-11-20",
              "2026-11-20T25:00:00", "", "now", "1e309"]
EDGE_NUMBERS = ["1e309", "-1e309", "inf", "-inf", "nan", "NaN", "1e-400", "0", "-0", "１", "٣", str(2**64), str(-2**63 - 1),
                "0x10", "1_000", "", "9" * 400]
EDGE_IDS = ["0", "-1", str(2**63), str(2**64), "１", "٣", "1e3", "1.5", "", "abc", "9" * 100]
EDGE_TEXT = ["", " ", "%", "'", '"', "\u202e", "😀", "a" * 3000, "２０２６", "\x7f", "null", "[]"]
LIST_PARAMS = ["page", "page_size", "per_page", "sort", "ordering", "format", "columns", "cursor", "ids", "cells"]
LIST_VALUES = ["0", "-1", "9" * 30, "1e309", "１", "", "csv", "all", "-", "hour", "-gpu_seconds", "nonsense", "json"]

_chars = st.characters(blacklist_categories=("Cs",))
_text = st.text(alphabet=_chars, max_size=30)
_date_values = st.one_of(st.sampled_from(EDGE_DATES), st.dates().map(dt.date.isoformat), _text)
_time_values = st.one_of(st.sampled_from(EDGE_TIMES),
                         st.datetimes(timezones=st.just(UTC)).map(lambda t: t.isoformat()), _text)
_number_values = st.one_of(st.sampled_from(EDGE_NUMBERS), st.integers().map(str),
                           st.floats(allow_nan=True, allow_infinity=True).map(repr),
                           st.decimals(allow_nan=True, allow_infinity=True).map(str), _text)


def _values(kind: str, ids: list[int], choices: list[str]):
    if kind == "date":
        return _date_values
    if kind == "time":
        return _time_values
    if kind == "number":
        return _number_values
    if kind == "id":
        return st.one_of(st.sampled_from(EDGE_IDS), st.sampled_from([str(i) for i in ids] or ["1"]),
                         st.integers().map(str))
    if kind == "choice":
        return st.one_of(st.sampled_from(choices or ["x"]), st.sampled_from(EDGE_TEXT), _text)
    if kind == "bool":
        return st.sampled_from(["yes", "no", "true", "false", "1", "0", "", "２", "maybe"])
    return st.one_of(st.sampled_from(EDGE_TEXT), _text)


@st.composite
def queries(draw, target: Target, ids: list[int], choices: list[str]):
    query: dict[str, list[str]] = {}
    for name, kind in target.params:
        if draw(st.booleans()):
            query[name] = draw(st.lists(_values(kind, ids, choices), min_size=1, max_size=3))
    for _ in range(draw(st.integers(0, 2))):
        name = draw(st.one_of(st.sampled_from(LIST_PARAMS), st.text(alphabet="abcdefgh_", min_size=1, max_size=8)))
        query[name] = draw(st.lists(st.one_of(st.sampled_from(LIST_VALUES), _text), min_size=1, max_size=2))
    for key, value in target.extra:
        query[key] = [value]
    return query


def sweep_query(target: Target, index: int) -> dict[str, list[str]]:
    """Every filter of the target at an edge at once (which edge rotates with `index`)."""
    edges = {"date": ["9999-12-31", "0001-01-01", "２０２６-１１-２０", "20261120"],
             "time": ["9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59", "２０２６-１１-２０T00:00:00Z", ""],
             "number": ["1e309", "nan", "１", "1e-400"], "id": [str(2**64), "１", "", "0"],
             "choice": ["", "１", "x", ""], "bool": ["", "２", "yes", "no"], "text": ["", "２０２６", "%", "a" * 3000]}
    query = {name: [edges[kind][index % 4]] for name, kind in target.params}
    query.update({"page": ["9" * 30], "sort": ["-nonsense"]} if index % 2 else {"page": ["0"], "unknown": ["1", "2"]})
    for key, value in target.extra:
        query[key] = [value]
    return query


# --- The world and the test -----------------------------------------------------------------------------

@pytest.fixture
def world(org, users):
    from ledger.models import Kind, LedgerEntry
    from ledger.services import rate_create
    from usage.services import usage_snapshot_take

    usage_snapshot_take()
    hour = dt.datetime(2026, 11, 20, 10, tzinfo=UTC)
    LedgerEntry.objects.create(hour=hour, kind=Kind.CLOSING, recorded=hour, cluster_id=org.cluster.pk,
                               pool_id=org.a100.pk, gpu_model="NVIDIA-A100-SXM4-40GB", department_id=org.rnd.pk,
                               project_id=org.rnd_a.pk, gpu_seconds=3600)
    rate_create(actor=None, gpu_model="NVIDIA-A100-SXM4-40GB", currency="EUR", valid_from=dt.date(2026, 1, 1),
                gpu_hour=Decimal("2.5"))
    return org


def _status(client: Client, target: Target, query: dict) -> int:
    response = client.get(target.path, query)
    if getattr(response, "streaming", False):
        for _ in response:  # a streamed CSV fails while it streams, if it fails
            pass
    return response.status_code


def test_no_filter_of_any_list_answers_a_5xx(world, users, monkeypatch):
    clients = {}
    for role, user in sorted(users.items()):
        clients[role] = Client()
        clients[role].force_login(user)
    targets = discover(clients["sysadmin"], monkeypatch)
    paths = {t.path.rstrip("/") for t in targets}  # (the API's routes answer with or without the slash)
    # The lists the issue names, each with its CSV and API twin, are among those found.
    for expected in ("/ledger/", "/ledger/export.csv", "/usage/", "/usage/export.csv", "/api/v1/ledger-entries/",
                     "/api/v1/ledger-entries/export/", "/api/v1/usage-snapshots/", "/api/v1/usage-snapshots/export/",
                     "/audit/", "/api/v1/audit-events/", "/rates/", "/api/v1/rates/"):
        assert expected.rstrip("/") in paths, (expected, sorted(paths))
    ids = sorted({world.cluster.pk, world.a100.pk, world.default.pk, world.rnd.pk, world.rnd_a.pk, world.ops_a.pk})
    choices = ["closing", "correction", "project", "department", "pool", "create", "update", "Running", "Pending",
               "train", "ready", "not_ready", "api", "page"]

    for index, target in enumerate(targets):
        for role, client in clients.items():
            query = sweep_query(target, index + len(role))
            assert _status(client, target, query) < 500, (role, str(target), query)

    @settings(max_examples=_examples(), derandomize=True, database=None, deadline=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def probe(data):
        target = data.draw(st.sampled_from(targets), label="target")
        role = data.draw(st.sampled_from(sorted(clients)), label="role")
        query = data.draw(queries(target, ids, choices), label="query")
        assert _status(clients[role], target, query) < 500, (role, str(target), query)

    probe()
