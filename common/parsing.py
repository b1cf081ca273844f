"""Bounded parsing of what users send: JSON, YAML, form fields and query strings.

One set of rules, applied where input is parsed (the API's parsers, the pages' form data and query
strings, pod templates and rule sets typed as JSON or YAML), each refusal naming the field:

- nesting: at most CONSOLE_MAX_NESTING (64) levels of lists and mappings. JSON is parsed by orjson,
  which refuses more than 1,024 levels without recursing in Python, and the depth is then checked
  iteratively; YAML is checked on the parser's events BEFORE any node is composed, so 10,000 levels
  cost nothing but the scan of the first 65;
- YAML anchors and aliases (`&name`, `*name`) are refused, also before composing: a "billion laughs"
  document of 500 bytes would otherwise expand to billions of nodes (in the JSON round trip that
  follows, or in anything that walks the value);
- one YAML document per field (`---` separating two is refused);
- NUL and the other control characters (C0 except tab, line feed and carriage return, and DEL) are
  refused in every string, keys included, of JSON and YAML, form fields and query strings.

Sizes are bounded before any of this: the request body (common/limits.py) and each document field
(MAX_DOCUMENT_CHARS, checked by the services that store documents).
"""
from __future__ import annotations

import datetime
import json
import re
import sys
from decimal import Decimal
from typing import Any, Iterable

import orjson
import yaml
from django import forms
from django.conf import settings
from django.forms.fields import InvalidJSONInput, JSONString
from django.http import HttpResponse, JsonResponse
from django.template import loader
from rest_framework import exceptions, parsers

DEFAULT_MAX_NESTING = 64
# A pod template, a rule set or any other document a person types: at most this many characters of
# text (or of JSON once parsed). Kubernetes stores at most 1.5 MiB per object; a Pod template is a few KiB.
MAX_DOCUMENT_CHARS = 65536
CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_NAMES = {0: "NUL", 7: "BEL", 8: "BS", 0x0B: "VT", 0x0C: "FF", 0x1B: "ESC", 0x7F: "DEL"}
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def max_nesting() -> int:
    return int(getattr(settings, "CONSOLE_MAX_NESTING", DEFAULT_MAX_NESTING))


class InputError(ValueError):
    """Input refused: `field` (the top-level field, "" for the whole body), `path` (where inside it),
    `message` (the rule, in words)."""

    def __init__(self, field: str, message: str, path: str = "") -> None:
        self.field = field
        self.path = path or field
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)

    def as_errors(self) -> dict[str, list[str]]:
        return {self.field or "non_field_errors": [self.message]}


def _where(path: str) -> str:
    return path if len(path) <= 120 else path[:117] + "…"


def control_character_message(text: str, match: re.Match) -> str:
    code = ord(match.group(0))
    name = _NAMES.get(code, "control character")
    return (f"Contains the control character U+{code:04X} ({name}) at position {match.start() + 1}: text may "
            "hold tab, line feed and carriage return, but no NUL or other control characters.")

def check_value(value: Any, *, field: str = "", limit: int | None = None) -> None:
    """Walk a parsed value without recursion: nesting at most `limit` levels, no control character in
    any string (keys too). Raises InputError naming the top-level field and the path inside it."""
    limit = max_nesting() if limit is None else limit
    stack: list[tuple[Any, str, str, int]] = [(value, field, field, 0)]
    while stack:
        item, top, path, depth = stack.pop()
        if isinstance(item, str):
            match = CONTROL_RE.search(item)
            if match:
                raise InputError(top, control_character_message(item, match) + f" (in {_where(path)})"
                                 if path else control_character_message(item, match), path)
            continue
        if isinstance(item, dict):
            children: Iterable[tuple[Any, Any]] = item.items()
            is_dict = True
        elif isinstance(item, list):
            children = enumerate(item)
            is_dict = False
        else:
            continue
        if depth + 1 > limit:
            raise InputError(top, f"Nested deeper than {limit} levels (at {_where(path) or 'the top'}): lists and "
                                  f"mappings may nest at most {limit} levels.", path)
        for key, child in children:
            if is_dict:
                key_text = key if isinstance(key, str) else str(key)
                match = CONTROL_RE.search(key_text)
                if match:
                    raise InputError(top or key_text, control_character_message(key_text, match)
                                     + f" (in a key of {_where(path) or 'the body'})", path)
                child_path = f"{path}.{key_text}" if path else key_text
                child_top = top or key_text
            else:
                child_path = f"{path}[{key}]"
                child_top = top
            stack.append((child, child_top, child_path, depth + 1))


def loads_json(data: bytes | str, *, field: str = "", limit: int | None = None) -> Any:
    """JSON from a user: orjson (no recursion in Python), then the nesting and control-character rules."""
    limit = max_nesting() if limit is None else limit
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if "recursion" in str(exc):
            raise InputError(field, f"Nested deeper than {limit} levels: lists and mappings may nest at most "
                                    f"{limit} levels.") from exc
        raise InputError(field, f"Not valid JSON: {exc}.") from exc
    check_value(value, field=field, limit=limit)
    return value


def _yaml_problem(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"Not valid JSON or YAML{where}: {problem}."


def _event_where(event: yaml.Event) -> str:
    mark = getattr(event, "start_mark", None)
    return f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""


def check_yaml_events(text: str, *, field: str = "", limit: int | None = None) -> None:
    """Scan the YAML parser's events (no node is built): refuse anchors and aliases, a second document,
    and nesting deeper than `limit`, stopping at the first. Cost: linear in the text scanned."""
    limit = max_nesting() if limit is None else limit
    depth = 0
    documents = 0
    try:
        for event in yaml.parse(text, Loader=_YAML_LOADER):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise InputError(field, "YAML anchors and aliases (&name, *name) are not accepted: write each value "
                                        f"out{_event_where(event)}.")
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > limit:
                    raise InputError(field, f"Nested deeper than {limit} levels{_event_where(event)}: lists and "
                                            f"mappings may nest at most {limit} levels.")
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
            elif isinstance(event, yaml.DocumentStartEvent):
                documents += 1
                if documents > 1:
                    raise InputError(field, f"One YAML document only{_event_where(event)}: remove the second '---'.")
    except yaml.YAMLError as exc:
        raise InputError(field, _yaml_problem(exc)) from exc


def loads_yaml(text: str, *, field: str = "", limit: int | None = None) -> Any:
    """YAML from a user: the event scan first (bounded), then safe loading, then the value rules; what
    JSON cannot hold is converted (dates become text) or refused (NaN, infinities)."""
    check_yaml_events(text, field=field, limit=limit)
    try:
        value = yaml.load(text, Loader=_YAML_LOADER)
    except yaml.YAMLError as exc:
        raise InputError(field, _yaml_problem(exc)) from exc
    try:
        # Bounded now (no aliases, at most `limit` levels): what JSON can hold, as JSON would give it.
        value = json.loads(json.dumps(value, default=str, allow_nan=False))
    except (ValueError, TypeError) as exc:
        raise InputError(field, f"Cannot be stored as JSON: {exc}.") from exc
    check_value(value, field=field, limit=limit)
    return value


def loads_document(text: str, *, field: str = "", limit: int | None = None,
                   max_chars: int = MAX_DOCUMENT_CHARS) -> Any:
    """A JSON or YAML document a person typed (JSON first, as before; YAML when it is not JSON)."""
    if len(text) > max_chars:
        raise InputError(field, f"At most {max_chars} characters (got {len(text)}).")
    stripped = text.strip()
    try:
        value = orjson.loads(stripped)
    except orjson.JSONDecodeError as exc:
        if "recursion" in str(exc):
            raise InputError(field, f"Nested deeper than {max_nesting() if limit is None else limit} levels: "
                                    "lists and mappings may nest at most that many levels.") from exc
        return loads_yaml(stripped, field=field, limit=limit)
    check_value(value, field=field, limit=limit)
    return value


# ---------------------------------------------------------------------------------------------------
# Django forms with a JSON field (the Django admin's editable mirrors)

class BoundedJSONFormField(forms.JSONField):
    """forms.JSONField reads with json.loads, which a deep enough document ends in RecursionError (a 500);
    this one reads with loads_json and says the rule."""

    def to_python(self, value):
        if self.disabled:
            return value
        if value in self.empty_values:
            return None
        if isinstance(value, (list, dict, int, float, JSONString)):
            return value
        try:
            converted = loads_json(value, field=self.label or "")
        except InputError as exc:
            raise forms.ValidationError(exc.message, code="invalid") from exc
        return JSONString(converted) if isinstance(converted, str) else converted

    def bound_data(self, data, initial):
        if self.disabled:
            return initial
        if data is None:
            return None
        try:
            return loads_json(data)
        except InputError:
            return InvalidJSONInput(data)


JSON_ADMIN_FIELDS = {"form_class": BoundedJSONFormField}


# ---------------------------------------------------------------------------------------------------
# The API's parsers (REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"])

def _refuse(exc: InputError):
    return exceptions.ValidationError(exc.as_errors())


def _check_form(data) -> None:
    """Form fields (a QueryDict): keys and every value of every key."""
    for key in data.keys():
        match = CONTROL_RE.search(key)
        if match:
            raise InputError("non_field_errors", control_character_message(key, match) + " (in a field name)")
        for value in data.getlist(key):
            if isinstance(value, str):
                match = CONTROL_RE.search(value)
                if match:
                    raise InputError(key, control_character_message(value, match))


class BoundedJSONParser(parsers.JSONParser):
    """JSON bodies of every API endpoint: orjson, nesting and control characters checked (400 naming the field)."""

    def parse(self, stream, media_type=None, parser_context=None):
        data = stream.read() if stream is not None else b""
        if not data.strip():
            raise exceptions.ParseError("JSON parse error - the body is empty.")
        try:
            return loads_json(data)
        except InputError as exc:
            raise _refuse(exc) from exc


class BoundedFormParser(parsers.FormParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        try:
            _check_form(data)
        except InputError as exc:
            raise _refuse(exc) from exc
        return data


class BoundedMultiPartParser(parsers.MultiPartParser):
    def parse(self, stream, media_type=None, parser_context=None):
        parsed = super().parse(stream, media_type, parser_context)
        try:
            _check_form(parsed.data)
        except InputError as exc:
            raise _refuse(exc) from exc
        return parsed


# ---------------------------------------------------------------------------------------------------
# Pages: form data and query strings

class ControlCharacterMiddleware:
    """Query strings (every path) and form data (pages; the API's are its parsers') with a NUL or another
    control character are refused with 400 naming the field, before any view sees them."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            _check_form(request.GET)
            if (request.method == "POST" and not request.path.startswith("/api/")
                    and request.content_type in ("application/x-www-form-urlencoded", "multipart/form-data")):
                _check_form(request.POST)
        except InputError as exc:
            return refusal_response(request, exc)
        return self.get_response(request)


def refusal_response(request, exc: InputError):
    field = exc.field if exc.field and exc.field != "non_field_errors" else ""
    if request.path.startswith("/api/"):
        from common import requestid  # (late: this module is imported by the settings' parsers)

        return JsonResponse({"detail": f"Invalid input: {field + ': ' if field else ''}{exc.message}",
                             "errors": exc.as_errors(), "request_id": requestid.of(request)}, status=400)

    body = loader.render_to_string("400.html", {"field": field, "message": exc.message})
    return HttpResponse(body, status=400)


# ---------------------------------------------------------------------------------------------------
# Dates, months, numbers and quantities a person sends (query strings, forms, API bodies, CSV filters)
#
# One rule each, whatever the channel (the field classes of common/fields.py apply them to DRF
# serializers, Django forms and django-filter FilterSets):
#
# - digits are ASCII (0-9): Python reads "２０２６" (full-width) or "٢٠٢٦" (Arabic-Indic) as 2026, which
#   nobody typing into a date or a price means, and which the cluster and the CSV consumers do not read;
# - a date is ISO YYYY-MM-DD exactly (not 20261101, not 2026-1-1), a day of the calendar (0001-01-01 to
#   9999-12-31); a range on dates ends before the day after its last one, or has no end when that last day
#   is the calendar's (`day_after`);
# - a month is YYYY-MM;
# - a number is finite and within what a float holds (±1.8e308): "inf", "nan" and "1e309" are refused.

MAX_NUMBER_CHARS = 100
FLOAT_MAX = Decimal(sys.float_info.max)
_DATE_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", re.ASCII)
_MONTH_RE = re.compile(r"[0-9]{4}-[0-9]{2}", re.ASCII)
_DECIMAL_RE = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
_INTEGER_RE = re.compile(r"[+-]?[0-9]+(?:\.0*)?", re.ASCII)
_FLOAT_WORDS = {"inf", "+inf", "-inf", "infinity", "+infinity", "-infinity", "nan", "+nan", "-nan", "snan"}


def _shown(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "…"


_DIGITS_RE = re.compile(r"[0-9]+", re.ASCII)


def is_digits(text: Any) -> bool:
    """Whether `text` is one or more ASCII digits (str.isdigit() is also true of "２" and "²", which
    int() reads as 2 or refuses with a ValueError)."""
    return isinstance(text, str) and _DIGITS_RE.fullmatch(text) is not None


def other_digits(text: str) -> str:
    """The digits of `text` that are not ASCII 0-9 ("" when there are none)."""
    return "".join(ch for ch in text if ch.isdigit() and not "0" <= ch <= "9")


def _text(value: Any, field: str) -> str:
    text = value if isinstance(value, str) else str(value)
    text = text.strip()
    others = other_digits(text)
    if others:
        raise InputError(field, f"“{_shown(text)}” holds digits other than 0-9 ({_shown(others)}): write the "
                                "digits 0-9.")
    return text


def parse_date(value: Any, *, field: str = "") -> datetime.date:
    """YYYY-MM-DD, a day of the calendar (0001-01-01 to 9999-12-31); a date passes as it is."""
    if isinstance(value, datetime.datetime):
        return value.date()
    if isinstance(value, datetime.date):
        return value
    text = _text(value, field)
    if not _DATE_RE.fullmatch(text):
        raise InputError(field, f"“{_shown(text)}” is not a date: write it YYYY-MM-DD, e.g. 2026-11-01.")
    try:
        return datetime.date.fromisoformat(text)
    except ValueError:
        raise InputError(field, f"“{text}” is not a day of the calendar (years 0001 to 9999, months 01 to 12, "
                                "and the days each month has).") from None


def parse_month(value: Any, *, field: str = "month", first_year: int = 1) -> tuple[int, int]:
    """YYYY-MM -> (year, month)."""
    text = _text(value, field)
    if _MONTH_RE.fullmatch(text):
        year, month = int(text[:4]), int(text[5:])
        if first_year <= year <= 9999 and 1 <= month <= 12:
            return year, month
    raise InputError(field, f"“{_shown(text)}” is not a month; write it YYYY-MM, e.g. 2026-11"
                            + (f" (years {first_year} to 9999)." if first_year > 1 else "."))


def day_start(day: datetime.date) -> datetime.datetime:
    """Midnight (UTC) at the start of `day`."""
    return datetime.datetime.combine(day, datetime.time.min, tzinfo=datetime.timezone.utc)


def day_after(day: datetime.date) -> datetime.datetime | None:
    """Midnight (UTC) at the end of `day`, the exclusive end of a range whose last day is `day`; None
    when `day` is the calendar's last (9999-12-31): such a range has no end."""
    if day >= datetime.date.max:
        return None
    return day_start(day + datetime.timedelta(days=1))


def days_before(moment: datetime.datetime, days: float) -> datetime.datetime:
    """`moment` minus `days`, or the calendar's first moment when that would be before it."""
    try:
        return moment - datetime.timedelta(days=days)
    except OverflowError:
        return datetime.datetime.min.replace(tzinfo=moment.tzinfo)


def _finite_decimal(number: Decimal, text: str, field: str) -> Decimal:
    if not number.is_finite():
        raise InputError(field, f"“{_shown(text)}” is not a number: infinities and NaN are not accepted.")
    if abs(number) > FLOAT_MAX:
        raise InputError(field, f"“{_shown(text)}” is too large: numbers are at most 1.8e308 in size.")
    return number


def parse_decimal(value: Any, *, field: str = "") -> Decimal:
    """A finite number (text in decimal or e-notation with ASCII digits, or a JSON number) as a Decimal,
    at most 1.8e308 in size. Bounds, digits and places are the caller's (the field classes)."""
    if isinstance(value, bool):
        raise InputError(field, "A number is required, not true or false.")
    if isinstance(value, Decimal):
        return _finite_decimal(value, str(value), field)
    if isinstance(value, int):
        return _finite_decimal(Decimal(value), str(value), field)
    if isinstance(value, float):
        return _finite_decimal(Decimal(repr(value)) if value == value else Decimal("NaN"), repr(value), field)
    text = _text(value, field)
    if text.lower() in _FLOAT_WORDS:
        raise InputError(field, f"“{_shown(text)}” is not a number: infinities and NaN are not accepted.")
    if len(text) > MAX_NUMBER_CHARS or not _DECIMAL_RE.fullmatch(text):
        raise InputError(field, f"“{_shown(text)}” is not a number: write digits 0-9, with a point for a fraction "
                                "(e.g. 2.50).")
    return _finite_decimal(Decimal(text), text, field)


def parse_integer(value: Any, *, field: str = "") -> int:
    """A whole number (text of ASCII digits, "3.0" too, or a JSON number without fraction)."""
    if isinstance(value, bool):
        raise InputError(field, "A whole number is required, not true or false.")
    if isinstance(value, int):
        return value
    if isinstance(value, (float, Decimal)):
        number = parse_decimal(value, field=field)
        if number != number.to_integral_value():
            raise InputError(field, f"“{_shown(str(value))}” is not a whole number.")
        return int(number)
    text = _text(value, field)
    if len(text) > MAX_NUMBER_CHARS or not _INTEGER_RE.fullmatch(text):
        raise InputError(field, f"“{_shown(text)}” is not a whole number: write digits 0-9 (e.g. 42).")
    return int(text.split(".")[0])


def parse_quantity(value: Any, *, field: str = "") -> Decimal:
    """A Kubernetes quantity (500m, 2, 1Gi, 1e3) as its amount, at most 1.8e308 (what a float holds:
    the schedulers' arithmetic) in size."""
    from kube.quantity import QuantityError, parse_quantity as kube_parse_quantity

    if isinstance(value, bool):
        raise InputError(field, "A quantity is required (e.g. 500m, 2, 1Gi), not true or false.")
    text = value.strip() if isinstance(value, str) else str(value)
    if isinstance(value, str):
        _text(value, field)
    try:
        amount = kube_parse_quantity(value)
    except QuantityError:
        raise InputError(field, f"{_shown(text)!r} is not a Kubernetes quantity (e.g. 500m, 2, 1Gi, 512Mi).") from None
    if abs(amount) > FLOAT_MAX:
        raise InputError(field, f"{_shown(text)!r} is too large: a quantity is at most 1.8e308.")
    return amount
