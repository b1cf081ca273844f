"""The quick ways to a table cell's HTML read exactly as Django's: escaping, format_html, reverse()."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.urls import NoReverseMatch, reverse, set_script_prefix
from django.utils import html as django_html
from django.utils.safestring import mark_safe
from django.utils.translation import gettext_lazy
from hypothesis import given, strategies as st

from ui.html import esc, format_html, link
from ui.paths import path_to

VALUES = st.one_of(st.text(), st.integers(), st.floats(allow_nan=False), st.none(), st.booleans(),
                   st.decimals(allow_nan=False, allow_infinity=False), st.text().map(mark_safe))


@given(VALUES)
def test_a_value_is_escaped_as_conditional_escape_escapes_it(value):
    assert esc(value) == django_html.conditional_escape(value)


@given(st.lists(VALUES, max_size=4), st.dictionaries(st.sampled_from("abc"), VALUES, max_size=3))
def test_a_fragment_reads_as_django_format_html_writes_it(args, kwargs):
    template = "<b>" + "".join(f"<i>{{{i}}}</i>" for i in range(len(args))) + "".join(
        f'<span title="{{{k}}}">{{{k}}}</span>' for k in kwargs) + "</b>"
    if not (args or kwargs):
        args = ["<x>"]
        template = "{}"
    ours, django = format_html(template, *args, **kwargs), django_html.format_html(template, *args, **kwargs)
    assert ours == django and hasattr(ours, "__html__")


def test_lazy_and_safe_values_and_links():
    assert esc(gettext_lazy("<Nodes>")) == "&lt;Nodes&gt;"
    assert esc(mark_safe("<b>x</b>")) == "<b>x</b>"
    assert esc(Decimal("1.50")) == "1.50"
    assert link("/a?b=1&c=2", "x<y") == '<a href="/a?b=1&amp;c=2">x&lt;y</a>'
    assert link("/a/", mark_safe("<b>x</b>")) == '<a href="/a/"><b>x</b></a>'


@pytest.mark.parametrize("name", ["node-detail", "pool-detail", "workload-detail", "workload-stop", "project-detail"])
@pytest.mark.parametrize("pk", [0, 1, 42, 10 ** 12])
def test_an_address_by_id_is_the_one_reverse_gives(name, pk):
    assert path_to(name, pk) == reverse(name, args=[pk])


def test_an_address_follows_the_script_prefix_and_refuses_what_reverse_refuses():
    assert path_to("workload-list") == reverse("workload-list")
    set_script_prefix("/console/")
    try:
        assert path_to("node-detail", 7) == reverse("node-detail", args=[7]) == "/console/nodes/7/"
        assert path_to("workload-list") == "/console/workloads/"
    finally:
        set_script_prefix("/")
    assert path_to("node-detail", 7) == "/nodes/7/"
    for bad in (-1, None, "x"):
        with pytest.raises(NoReverseMatch):
            path_to("node-detail", bad)
    assert path_to("node-detail", "12") == reverse("node-detail", args=["12"])
