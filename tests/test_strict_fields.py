"""Every date, time and number a person can send is read by the strict field classes of
common/fields.py (ASCII digits, ISO dates, finite numbers within a float): every writable field of every
serializer, every field of every form and every filter of every FilterSet of the console, found by
walking the classes (a new one is covered as it is written)."""
from __future__ import annotations

import importlib
import pkgutil

import django_filters
import pytest
from django import forms
from django.apps import apps
from django.conf import settings
from rest_framework import serializers

from common import fields as strict

pytestmark = pytest.mark.django_db

CONSOLE_APPS = [name for name in settings.INSTALLED_APPS if "." not in name and (settings.BASE_DIR / name).is_dir()]
# Most derived first (Django's DecimalField and FloatField are IntegerFields).
LOOSE_FORM = {forms.DateField: strict.StrictDateFormField, forms.DecimalField: strict.StrictDecimalFormField,
              forms.FloatField: strict.StrictDecimalFormField, forms.IntegerField: strict.StrictIntegerFormField}
LOOSE_API = {serializers.DateField: strict.StrictDateField, serializers.DecimalField: strict.StrictDecimalField,
             serializers.IntegerField: strict.StrictIntegerField, serializers.FloatField: strict.StrictFloatField}


def _import_everything() -> None:
    for app in CONSOLE_APPS:
        package = importlib.import_module(app)
        for module in pkgutil.walk_packages(package.__path__, prefix=f"{app}."):
            if ".migrations" in module.name or ".management" in module.name or module.name.endswith("tests"):
                continue
            importlib.import_module(module.name)


def _subclasses(base: type) -> list[type]:
    found, stack = [], [base]
    while stack:
        for sub in stack.pop().__subclasses__():
            stack.append(sub)
            if sub.__module__.split(".")[0] in CONSOLE_APPS + ["common"]:
                found.append(sub)
    return found


def _loose_form_class(cls: type) -> str | None:
    if issubclass(cls, forms.DateTimeField):
        return None if issubclass(cls, strict.StrictIsoDateTimeField) else (
            f"{cls.__name__} (use common.fields.StrictIsoDateTimeField)")
    for loose, wanted in LOOSE_FORM.items():
        if issubclass(cls, loose):
            return None if issubclass(cls, wanted) else f"{cls.__name__} (use common.fields.{wanted.__name__})"
    return None


def _loose_form_field(field: forms.Field) -> str | None:
    if isinstance(field, forms.MultiValueField):
        for sub in field.fields:
            problem = _loose_form_field(sub)
            if problem:
                return problem
        return None
    return _loose_form_class(type(field))


def _loose_filter(filter_) -> str | None:
    cls = filter_.field_class
    if issubclass(cls, django_filters.fields.RangeField):
        # Ranges of dates or times: the strict range (two StrictIsoDateTimeFields), nothing else.
        loose = (django_filters.fields.DateRangeField, django_filters.fields.DateTimeRangeField,
                 django_filters.fields.IsoDateTimeRangeField)
        if issubclass(cls, loose) or (cls is not strict.StrictIsoDateTimeRangeField
                                      and filter_.__class__.__name__.lower().find("date") >= 0):
            return f"{cls.__name__} (use common.fields.IsoDateTimeFromToRangeFilter)"
        return None
    return _loose_form_class(cls)


@pytest.fixture(scope="module")
def everything():
    _import_everything()
    assert apps.ready


def test_every_filter_of_every_filterset_is_strict(everything):
    filtersets = _subclasses(django_filters.FilterSet)
    assert len(filtersets) >= 15  # the console's FilterSets were found
    problems = []
    for filterset in filtersets:
        for name, filter_ in filterset.base_filters.items():
            problem = _loose_filter(filter_)
            if problem:
                problems.append(f"{filterset.__module__}.{filterset.__name__}.{name}: {problem}")
    assert problems == []


def test_every_field_of_every_form_is_strict(everything):
    found = _subclasses(forms.BaseForm)
    assert len(found) >= 10
    problems = []
    for form in found:
        for name, field in getattr(form, "base_fields", {}).items():
            if getattr(field.widget, "input_type", "") == "hidden" and not isinstance(field, forms.IntegerField):
                continue
            problem = _loose_form_field(field)
            if problem:
                problems.append(f"{form.__module__}.{form.__name__}.{name}: {problem}")
    assert problems == []


def _loose_api_fields(serializer: serializers.BaseSerializer, prefix: str) -> list[str]:
    problems = []
    if isinstance(serializer, serializers.ListSerializer):
        serializer = serializer.child
    for name, field in serializer.fields.items():
        if field.read_only:
            continue
        child = getattr(field, "child", None)
        for candidate, where in ((field, name), (child, f"{name}[]")):
            if candidate is None:
                continue
            if isinstance(candidate, serializers.BaseSerializer):
                problems += _loose_api_fields(candidate, f"{prefix}.{where}")
                continue
            for loose, wanted in LOOSE_API.items():
                if isinstance(candidate, serializers.DateTimeField):
                    break  # (a DateTimeField is no DateField in DRF; times are read by DRF's ISO 8601 parser)
                if isinstance(candidate, loose) and not isinstance(candidate, wanted):
                    problems.append(f"{prefix}.{where}: {type(candidate).__name__} (use common.fields.{wanted.__name__})")
    return problems


def test_every_writable_field_of_every_serializer_is_strict(everything):
    found = [cls for cls in _subclasses(serializers.Serializer) if not cls.__name__.startswith("_")]
    assert len(found) >= 30
    problems = []
    for serializer in found:
        try:
            instance = serializer(context={})
            instance.fields  # noqa: B018 - builds them
        except Exception:  # a serializer that needs its view's arguments: its declared fields
            problems += [f"{serializer.__name__}.{name}: {type(field).__name__}"
                         for name, field in serializer._declared_fields.items()
                         if not field.read_only and any(isinstance(field, loose) and not isinstance(field, wanted)
                                                        for loose, wanted in LOOSE_API.items())]
            continue
        problems += _loose_api_fields(instance, f"{serializer.__module__}.{serializer.__name__}")
    assert problems == []
