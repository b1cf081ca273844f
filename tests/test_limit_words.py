"""Limits said as amounts, in forms, serializers and a model's own validation (common/words.py,
common/fields.py): never a count of digits, never a database's integer range."""
from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.core.validators import DecimalValidator, MaxValueValidator, MinValueValidator

from common import words
from common.fields import StrictDecimalField, StrictDecimalFormField, StrictIntegerField, plain_errors


@pytest.mark.parametrize("call, said", [
    (lambda: words.at_most(1_000_000, "GPU"), "Enter at most 1,000,000 GPUs."),
    (lambda: words.at_most(1, "GPU"), "Enter at most 1 GPU."),
    (lambda: words.at_most(Decimal("2.5"), ("GiB", "GiB")), "Enter at most 2.5 GiB."),
    (lambda: words.at_most(2**63 - 1), "Enter a smaller number: this one is larger than the console can store."),
    (lambda: words.at_least(0), "Cannot be negative: enter 0 or more."),
    (lambda: words.places(3), "Enter at most 3 decimal places."),
    (lambda: words.places(1), "Enter at most 1 decimal place."),
    (lambda: words.places(0), "Enter a whole number (no decimal places)."),
    (lambda: words.below(10, 3, "GPU"), "Enter less than 10,000,000 GPUs."),
])
def test_limits_in_words(call, said):
    assert call() == said


def test_a_form_field_says_its_limits_as_amounts():
    field = StrictDecimalFormField(label="Deserved GPUs", max_digits=10, decimal_places=3, max_value=1_000_000,
                                   unit="GPU")
    for value, said in [("1.2345", "Enter at most 3 decimal places."), ("2000000", "Enter at most 1,000,000 GPUs."),
                        ("99999999999", "Enter at most 1,000,000 GPUs.")]:
        with pytest.raises(ValidationError) as exc:
            field.clean(value)
        assert exc.value.messages == [said]


def test_a_serializer_field_says_its_limits_as_amounts():
    from rest_framework import serializers

    decimal = StrictDecimalField(max_digits=9, decimal_places=2)
    with pytest.raises(serializers.ValidationError) as exc:
        decimal.run_validation("12345678.5")
    assert [str(e) for e in exc.value.detail] == ["Enter less than 10,000,000."]
    integer = StrictIntegerField(min_value=0, max_value=2**63 - 1)
    with pytest.raises(serializers.ValidationError) as exc:
        integer.run_validation(2**63)
    assert [str(e) for e in exc.value.detail] == [
        "Enter a smaller number: this one is larger than the console can store."]
    with pytest.raises(serializers.ValidationError) as exc:
        integer.run_validation(-1)
    assert [str(e) for e in exc.value.detail] == ["Cannot be negative: enter 0 or more."]


def _raised(validator, value) -> ValidationError:
    try:
        validator(value)
    except ValidationError as exc:
        return exc
    raise AssertionError("no error")


def test_a_models_own_limits_are_said_in_words_and_its_own_messages_kept():
    errors = ValidationError({
        "weight": [_raised(MaxValueValidator(9223372036854775807), 2**64)],
        "share": [_raised(DecimalValidator(5, 2), Decimal("1.234"))],
        "gpus": [_raised(DecimalValidator(10, 3), Decimal("123456789012"))],
        "low": [_raised(MinValueValidator(5), 1)],
        "quota": [ValidationError("GPU quota cannot be negative.", code="min_value", params={"limit_value": 0})],
    })
    assert plain_errors(errors).message_dict == {
        "weight": ["Enter a smaller number: this one is larger than the console can store."],
        "share": ["Enter at most 2 decimal places."],
        "gpus": ["Enter a smaller number."],
        "low": ["Enter at least 5."],
        "quota": ["GPU quota cannot be negative."],
    }
