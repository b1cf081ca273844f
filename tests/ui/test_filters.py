"""Every yes/no filter of every FilterSet reads Any / Yes / No (ui.filters.YesNoFilter), on the page, in
the CSV and in the API alike; none starts at django-filter's "Unknown"."""
import importlib
import inspect
from pathlib import Path

import django_filters
import pytest

from ui.filters import YesNoFilter

ROOT = Path(__file__).resolve().parent.parent.parent


def every_filterset():
    for path in sorted(ROOT.glob("*/filtersets.py")):
        module = importlib.import_module(f"{path.parent.name}.filtersets")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, django_filters.FilterSet) and cls.__module__ == module.__name__:
                yield cls


def test_every_boolean_filter_is_the_shared_any_yes_no_filter():
    sets = list(every_filterset())
    assert len(sets) >= 10  # every app's FilterSets are found
    booleans = [(cls.__name__, name, f) for cls in sets for name, f in cls.base_filters.items()
                if isinstance(f, django_filters.BooleanFilter)]
    assert ("WorkloadFilterSet", "preemptible") in [(c, n) for c, n, _ in booleans]
    for cls, name, f in booleans:
        assert isinstance(f, YesNoFilter), f"{cls}.{name} is a BooleanFilter: use ui.filters.YesNoFilter"
        field = f.field
        assert list(field.widget.choices) == [("", "Any"), ("true", "Yes"), ("false", "No")], (cls, name)


@pytest.mark.django_db
@pytest.mark.parametrize(("given", "read"), [
    (None, None), ("", None), ("true", True), ("True", True), ("1", True), ("yes", True),
    ("false", False), ("0", False), ("no", False), ("unknown", None), ("maybe", None),
])
def test_the_filter_reads_what_pages_and_scripts_send(given, read):
    from workloads.filtersets import WorkloadFilterSet
    from workloads.models import Workload

    data = {} if given is None else {"preemptible": given}
    filterset = WorkloadFilterSet(data, queryset=Workload.objects.none())
    assert filterset.is_valid()
    assert filterset.form.cleaned_data["preemptible"] is read
    selected = "true" if read is True else "false" if read is False else ""
    assert f'<option value="{selected}" selected>' in str(filterset.form["preemptible"])


@pytest.mark.django_db
def test_the_workloads_page_filters_preemptible_yes_and_no(client, org, users):
    from workloads.models import Workload

    Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="train-1", priority=50)
    Workload.objects.create(cluster=org.cluster, namespace="runai-rnd-a", name="serve-1", priority=125)
    client.force_login(users["researcher"])
    page = client.get("/workloads/").content.decode()
    assert '<option value="" selected>Any</option>' in page and "Unknown" not in page
    yes = client.get("/workloads/", {"preemptible": "true"}).content.decode()
    no = client.get("/workloads/", {"preemptible": "false"}).content.decode()
    assert 'data-workload="train-1"' in yes and 'data-workload="serve-1"' not in yes
    assert 'data-workload="serve-1"' in no and 'data-workload="train-1"' not in no
