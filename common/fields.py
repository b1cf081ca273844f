"""The parsers of common/parsing.py as field classes, defined once: DRF serializer fields, Django form
fields and django-filter filters for dates, times, decimals and whole numbers.

Every date, number or time a person sends goes through one of these (tests/test_strict_fields.py finds
any writable serializer field, form field or filter of the console that does not): ASCII digits only,
ISO dates exactly (YYYY-MM-DD), finite numbers within what a float holds, each refusal naming the rule
in words (the field is named by the form, the serializer's `errors` or the FilterSet).
"""
from __future__ import annotations

import datetime
from typing import Any

import django_filters
from django import forms
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django_filters.fields import IsoDateTimeField, RangeField
from django_filters.widgets import DateRangeWidget
from rest_framework import serializers

from common.parsing import InputError, other_digits, parse_date, parse_decimal, parse_integer
from common.words import at_least, at_most, below, places

DATE_WIDGET_ATTRS = {"type": "date"}


def _form_error(exc: InputError) -> forms.ValidationError:
    return forms.ValidationError(exc.message, code="invalid")


# ---------------------------------------------------------------------------------------------------
# Limits in words (common/words.py): a bound is said as the largest amount, never as a count of digits
# or a database's range. `unit` (optional keyword of every strict number field): "GPU", ("GiB", "GiB").

def limit_messages(*, unit=None, max_value=None, min_value=None, max_digits=None, decimal_places=None,
                   percent: bool = False) -> dict[str, str]:
    """The refusals of a number field's limits, by Django's and DRF's error codes (`percent`: Django's
    messages are %-formatted, so a literal % is doubled)."""
    unit = unit or ""
    messages: dict[str, str] = {}
    if max_value is not None:
        messages["max_value"] = at_most(max_value, unit)
    if min_value is not None:
        messages["min_value"] = at_least(min_value, unit)
    if max_digits is not None and decimal_places is not None:
        messages["max_digits"] = messages["max_whole_digits"] = (
            messages.get("max_value") or below(max_digits, decimal_places, unit))
    if decimal_places is not None:
        messages["max_decimal_places"] = places(decimal_places)
    if percent:
        messages = {code: text.replace("%", "%%") for code, text in messages.items()}
    return messages


_DJANGO_LIMIT_MESSAGES = {str(MaxValueValidator.message), str(MinValueValidator.message)}
_DIGIT_CODES = ("max_digits", "max_decimal_places", "max_whole_digits")  # DecimalValidator's, in digits


def plain_errors(exc: "DjangoValidationError") -> "DjangoValidationError":
    """A model's ValidationError with its limits said in words (the model's own numeric validators — the
    database's integer range, a DecimalField's digits — speak in digits)."""
    def plain(error):
        params = error.params or {}
        if error.code not in _DIGIT_CODES and str(error.message) not in _DJANGO_LIMIT_MESSAGES:
            return error  # a model's own words ("GPU quota cannot be negative.") stay
        if error.code == "max_value" and "limit_value" in params:
            return DjangoValidationError(at_most(params["limit_value"]), code=error.code)
        if error.code == "min_value" and "limit_value" in params:
            return DjangoValidationError(at_least(params["limit_value"]), code=error.code)
        if error.code == "max_decimal_places" and "max" in params:
            return DjangoValidationError(places(params["max"]), code=error.code)
        if error.code in ("max_digits", "max_whole_digits"):
            return DjangoValidationError("Enter a smaller number.", code=error.code)
        return error

    if hasattr(exc, "error_dict"):
        return DjangoValidationError({name: [plain(e) for e in errors] for name, errors in exc.error_dict.items()})
    return DjangoValidationError([plain(e) for e in exc.error_list])


# ---------------------------------------------------------------------------------------------------
# DRF


def _strict(parse, data, field: serializers.Field):
    """`parse(data)` with the field's name, its refusal as the field's validation error."""
    try:
        return parse(data, field=field.field_name or "")
    except InputError as exc:
        raise serializers.ValidationError(exc.message, code="invalid") from None

class StrictDateField(serializers.DateField):
    """YYYY-MM-DD exactly, ASCII digits (DRF's DateField reads 20261101, 2026-1-1 and full-width digits)."""

    def to_internal_value(self, value):
        if isinstance(value, datetime.datetime):
            self.fail("datetime")
        try:
            return parse_date(value, field=self.field_name or "")
        except InputError as exc:
            raise serializers.ValidationError(exc.message, code="invalid") from None


def _drf_limits(kwargs: dict, args: tuple = ()) -> dict:
    unit = kwargs.pop("unit", None)
    max_digits = kwargs.get("max_digits", args[0] if len(args) > 0 else None)
    decimal_places = kwargs.get("decimal_places", args[1] if len(args) > 1 else None)
    words = limit_messages(unit=unit, max_value=kwargs.get("max_value"), min_value=kwargs.get("min_value"),
                           max_digits=max_digits, decimal_places=decimal_places)
    kwargs["error_messages"] = {**words, **kwargs.get("error_messages", {})}
    return kwargs


class StrictDecimalField(serializers.DecimalField):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **_drf_limits(kwargs, args))

    def to_internal_value(self, data):
        number = _strict(parse_decimal, data, self)
        return super().to_internal_value(str(number))


class StrictIntegerField(serializers.IntegerField):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **_drf_limits(kwargs))

    def to_internal_value(self, data):
        number = _strict(parse_integer, data, self)
        return super().to_internal_value(number)


class StrictFloatField(serializers.FloatField):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **_drf_limits(kwargs))

    def to_internal_value(self, data):
        number = _strict(parse_decimal, data, self)
        return super().to_internal_value(float(number))


# The model fields' serializer fields, for ModelSerializers (common.api.ModelSerializer).
SERIALIZER_FIELD_MAPPING = {
    models.DateField: StrictDateField,
    models.DecimalField: StrictDecimalField,
    models.FloatField: StrictFloatField,
    models.IntegerField: StrictIntegerField,
    models.BigIntegerField: StrictIntegerField,
    models.SmallIntegerField: StrictIntegerField,
    models.PositiveIntegerField: StrictIntegerField,
    models.PositiveSmallIntegerField: StrictIntegerField,
    models.PositiveBigIntegerField: StrictIntegerField,
}


# ---------------------------------------------------------------------------------------------------
# Django forms

class StrictDateFormField(forms.DateField):
    """YYYY-MM-DD exactly (Django's DateField also reads 11/01/2026, 2026-1-1 and full-width digits)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("widget", forms.DateInput(attrs=dict(DATE_WIDGET_ATTRS), format="%Y-%m-%d"))
        super().__init__(*args, **kwargs)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            return parse_date(value, field=self.label or "")
        except InputError as exc:
            raise _form_error(exc) from None


def _form_limits(kwargs: dict, args: tuple = ()) -> dict:
    unit = kwargs.pop("unit", None)
    words = limit_messages(unit=unit, max_value=kwargs.get("max_value"), min_value=kwargs.get("min_value"),
                           max_digits=kwargs.get("max_digits"), decimal_places=kwargs.get("decimal_places"),
                           percent=True)
    kwargs["error_messages"] = {**words, **(kwargs.get("error_messages") or {})}
    return kwargs


class StrictDecimalFormField(forms.DecimalField):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **_form_limits(kwargs))

    def run_validators(self, value):
        # Too many digits and over the largest amount are one refusal, said once.
        try:
            super().run_validators(value)
        except forms.ValidationError as exc:
            seen, errors = set(), []
            for error in exc.error_list:
                text = error.message % error.params if error.params else error.message
                if text not in seen:
                    seen.add(text)
                    errors.append(error)
            raise forms.ValidationError(errors) from None

    def to_python(self, value):
        if value in self.empty_values or (isinstance(value, str) and not value.strip()):
            return None
        try:
            number = parse_decimal(value, field=self.label or "")
        except InputError as exc:
            raise _form_error(exc) from None
        return super().to_python(str(number))


class StrictIntegerFormField(forms.IntegerField):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **_form_limits(kwargs))

    def to_python(self, value):
        if value in self.empty_values or (isinstance(value, str) and not value.strip()):
            return None
        try:
            return parse_integer(value, field=self.label or "")
        except InputError as exc:
            raise _form_error(exc) from None


class StrictIsoDateTimeField(IsoDateTimeField):
    """An ISO 8601 time with ASCII digits, kept in UTC: any offset Python accepts (up to ±23:59) reaches
    the database as UTC (PostgreSQL refuses offsets beyond ±15:59), and a time that cannot be one says so."""

    def to_python(self, value):
        if isinstance(value, str) and other_digits(value):
            raise forms.ValidationError(f"“{value.strip()[:40]}” holds digits other than 0-9: write the digits 0-9.",
                                        code="invalid")
        value = super().to_python(value)
        if value is None or value.tzinfo is None:
            return value
        try:
            return value.astimezone(datetime.timezone.utc)
        except OverflowError:
            raise forms.ValidationError("Enter a time between the years 1 and 9999 (UTC).", code="invalid") from None


def strict_formfield(db_field: models.Field, **kwargs: Any) -> forms.Field | None:
    """ModelForm `formfield_callback`: the strict form field of each date and number model field."""
    if isinstance(db_field, models.DateTimeField):
        return db_field.formfield(**kwargs)
    if isinstance(db_field, models.DateField):
        kwargs.setdefault("form_class", StrictDateFormField)
    elif isinstance(db_field, models.DecimalField):
        kwargs.setdefault("form_class", StrictDecimalFormField)
    elif isinstance(db_field, models.IntegerField) and not db_field.choices:
        kwargs.setdefault("form_class", StrictIntegerFormField)
    return db_field.formfield(**kwargs)


class ModelForm(forms.ModelForm):
    """A ModelForm whose date and number fields are the strict ones; a subclass's Meta inherits this
    one's (`class Meta(ModelForm.Meta)`), which holds the callback."""

    class Meta:
        formfield_callback = staticmethod(strict_formfield)

    def _update_errors(self, errors):
        # The model's full_clean: its numeric limits in words (plain_errors).
        super()._update_errors(plain_errors(errors))


# ---------------------------------------------------------------------------------------------------
# django-filter

class DateFilter(django_filters.DateFilter):
    field_class = StrictDateFormField


class NumberFilter(django_filters.NumberFilter):
    field_class = StrictDecimalFormField


class StrictIsoDateTimeRangeField(RangeField):
    widget = DateRangeWidget

    def __init__(self, *args, **kwargs):
        super().__init__((StrictIsoDateTimeField(), StrictIsoDateTimeField()), *args, **kwargs)


class IsoDateTimeFromToRangeFilter(django_filters.IsoDateTimeFromToRangeFilter):
    """`<name>_after` / `<name>_before`: ISO 8601 times (ASCII digits), compared in UTC."""

    field_class = StrictIsoDateTimeRangeField


__all__ = ["DateFilter", "IsoDateTimeFromToRangeFilter", "ModelForm", "NumberFilter",
           "SERIALIZER_FIELD_MAPPING", "StrictDateField", "StrictDateFormField", "StrictDecimalField",
           "StrictDecimalFormField", "StrictFloatField", "StrictIntegerField", "StrictIntegerFormField",
           "StrictIsoDateTimeField", "limit_messages", "plain_errors", "strict_formfield"]
