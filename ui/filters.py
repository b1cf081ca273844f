"""Filters shared by every FilterSet (pages, CSV and API alike).

A yes/no filter reads Any / Yes / No: `YesNoFilter` in place of django-filter's BooleanFilter, whose
select starts at "Unknown". The URL carries `true` / `false` (also `1` / `0`, `yes` / `no`, any case);
empty or anything else means any.
"""
from __future__ import annotations

import django_filters
from django import forms

YES_NO_CHOICES = (("", "Any"), ("true", "Yes"), ("false", "No"))
_VALUES = {"true": True, "1": True, "yes": True, "2": True, "false": False, "0": False, "no": False, "3": False}


class AnyYesNoSelect(forms.Select):
    """Any / Yes / No; reads true/false, 1/0, yes/no (and Django's NullBooleanSelect 2/3)."""

    def __init__(self, attrs=None):
        super().__init__(attrs, YES_NO_CHOICES)

    def format_value(self, value):
        return ["true" if value is True or _VALUES.get(str(value).lower()) is True
                else "false" if value is False or _VALUES.get(str(value).lower()) is False else ""]

    def value_from_datadict(self, data, files, name):
        value = data.get(name)
        if isinstance(value, bool):
            return value
        return _VALUES.get(str(value).strip().lower()) if value is not None else None


class YesNoFilter(django_filters.BooleanFilter):
    """The console's one yes/no filter: Any (no filter) / Yes / No."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", AnyYesNoSelect)
        super().__init__(*args, **kwargs)
