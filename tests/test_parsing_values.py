"""The shared parsers of common/parsing.py: what they accept and what they refuse, and that anything else
is an InputError naming the field (never another exception)."""
from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.parsing import (InputError, day_after, day_start, days_before, is_digits, parse_date, parse_decimal,
                            parse_integer, parse_month, parse_quantity)

FAST = settings(derandomize=True, database=None, max_examples=300, deadline=None)


@pytest.mark.parametrize("text,day", [("2026-11-01", dt.date(2026, 11, 1)), (" 0001-01-01 ", dt.date.min),
                                      ("9999-12-31", dt.date.max), ("2024-02-29", dt.date(2024, 2, 29))])
def test_iso_dates_are_read(text, day):
    assert parse_date(text, field="d") == day


@pytest.mark.parametrize("text", ["20261101", "2026-1-1", "2026-11-1", "11/01/2026", "２０２６-１１-０１",
                                  "2026-11-01T00:00", "0000-01-01", "2026-02-29", "2026-13-01", "", "+2026-11-01"])
def test_anything_else_is_refused_naming_the_field(text):
    with pytest.raises(InputError) as refused:
        parse_date(text, field="valid_from")
    assert refused.value.field == "valid_from" and refused.value.message


def test_the_calendars_last_day_has_no_day_after():
    assert day_after(dt.date(2026, 11, 20)) == day_start(dt.date(2026, 11, 21))
    assert day_after(dt.date.max) is None
    first = day_start(dt.date.min)
    assert days_before(first + dt.timedelta(days=1), 7) == first


@pytest.mark.parametrize("text", ["1e309", "-1e309", "inf", "-Infinity", "nan", "sNaN", "１", "٣", "1,5", "0x10",
                                  "1_000", "", "."])
def test_numbers_past_a_float_or_not_ascii_are_refused(text):
    with pytest.raises(InputError) as refused:
        parse_decimal(text, field="gpu_hour")
    assert refused.value.field == "gpu_hour"


def test_numbers_within_a_float_are_read_exactly():
    assert parse_decimal("2.50", field="x") == Decimal("2.50")
    assert parse_decimal("1e308", field="x") == Decimal("1e308")
    assert parse_decimal("1e-400", field="x") == Decimal("1e-400")
    assert parse_decimal(3, field="x") == 3 and parse_integer("3.0", field="x") == 3
    with pytest.raises(InputError):
        parse_decimal(float("inf"), field="x")
    with pytest.raises(InputError):
        parse_integer("2.5", field="x")


def test_months_and_quantities():
    assert parse_month("2026-11") == (2026, 11)
    for text in ("２０２６-１１", "2026-1", "2026-13", "202611"):
        with pytest.raises(InputError):
            parse_month(text)
    assert parse_quantity("10Gi", field="storage") == 10 * 2**30
    for text in ("1e309", "２Gi", "lots"):
        with pytest.raises(InputError) as refused:
            parse_quantity(text, field="storage")
        assert refused.value.field == "storage"


@FAST
@given(st.text(max_size=40))
def test_any_text_is_read_or_refused_in_words(text):
    for parse in (parse_date, parse_decimal, parse_integer, parse_month, parse_quantity):
        try:
            parse(text, field="f")
        except InputError as exc:
            assert exc.field == "f" and exc.message
    assert is_digits(text) == (text != "" and all("0" <= c <= "9" for c in text))


@FAST
@given(st.dates())
def test_every_day_of_the_calendar_round_trips(day):
    assert parse_date(day.isoformat()) == day
