"""kube.quantity against upstream's own cases: k8s.io/apimachinery/pkg/api/resource/quantity_test.go
(kubernetes/kubernetes, staging/src/k8s.io/apimachinery/pkg/api/resource/quantity_test.go), transcribed.

An upstream `decQuantity(i, e, format)` is the amount i × 10^e written in that format.
"""
from __future__ import annotations

from decimal import Decimal

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from kube.quantity import (
    BINARY_SI, DECIMAL_EXPONENT, DECIMAL_SI, FORMAT_MESSAGE, QuantityError, canonical_quantity, format_quantity,
    parse_quantity, parse_quantity_format,
)

MAX_ALLOWED = Decimal(2**63 - 1)


def dec(i: int, e: int) -> Decimal:
    return Decimal(i).scaleb(e)


# TestQuantityParse: the table of (input, amount, format).
PARSE_TABLE = [
    ("0", dec(0, 0), DECIMAL_SI), ("0n", dec(0, 0), DECIMAL_SI), ("0u", dec(0, 0), DECIMAL_SI),
    ("0m", dec(0, 0), DECIMAL_SI), ("0Ki", dec(0, 0), BINARY_SI), ("0k", dec(0, 0), DECIMAL_SI),
    ("0Mi", dec(0, 0), BINARY_SI), ("0M", dec(0, 0), DECIMAL_SI), ("0Gi", dec(0, 0), BINARY_SI),
    ("0G", dec(0, 0), DECIMAL_SI), ("0Ti", dec(0, 0), BINARY_SI), ("0T", dec(0, 0), DECIMAL_SI),
    # Quantity less numbers are allowed
    ("1", dec(1, 0), DECIMAL_SI),
    # Binary suffixes
    ("1Ki", dec(1024, 0), BINARY_SI), ("8Ki", dec(8 * 1024, 0), BINARY_SI), ("7Mi", dec(7 * 1024**2, 0), BINARY_SI),
    ("6Gi", dec(6 * 1024**3, 0), BINARY_SI), ("5Ti", dec(5 * 1024**4, 0), BINARY_SI),
    ("4Pi", dec(4 * 1024**5, 0), BINARY_SI), ("3Ei", dec(3 * 1024**6, 0), BINARY_SI),
    ("10Ti", dec(10 * 1024**4, 0), BINARY_SI), ("100Ti", dec(100 * 1024**4, 0), BINARY_SI),
    # Decimal suffixes
    ("5n", dec(5, -9), DECIMAL_SI), ("4u", dec(4, -6), DECIMAL_SI), ("3m", dec(3, -3), DECIMAL_SI),
    ("9", dec(9, 0), DECIMAL_SI), ("8k", dec(8, 3), DECIMAL_SI), ("50k", dec(5, 4), DECIMAL_SI),
    ("7M", dec(7, 6), DECIMAL_SI), ("6G", dec(6, 9), DECIMAL_SI), ("5T", dec(5, 12), DECIMAL_SI),
    ("40T", dec(4, 13), DECIMAL_SI), ("300T", dec(3, 14), DECIMAL_SI), ("2P", dec(2, 15), DECIMAL_SI),
    ("1E", dec(1, 18), DECIMAL_SI),
    # Decimal exponents
    ("1E-3", dec(1, -3), DECIMAL_EXPONENT), ("1e3", dec(1, 3), DECIMAL_EXPONENT), ("1E6", dec(1, 6), DECIMAL_EXPONENT),
    ("1e9", dec(1, 9), DECIMAL_EXPONENT), ("1E12", dec(1, 12), DECIMAL_EXPONENT),
    ("1e15", dec(1, 15), DECIMAL_EXPONENT), ("1E18", dec(1, 18), DECIMAL_EXPONENT),
    # Nonstandard but still parsable
    ("1e14", dec(1, 14), DECIMAL_EXPONENT), ("1e13", dec(1, 13), DECIMAL_EXPONENT),
    ("100.035k", dec(100035, 0), DECIMAL_SI),
    # Things that look like floating point
    ("0.001", dec(1, -3), DECIMAL_SI), ("0.0005k", dec(5, -1), DECIMAL_SI), ("0.005", dec(5, -3), DECIMAL_SI),
    ("0.05", dec(5, -2), DECIMAL_SI), ("0.5", dec(5, -1), DECIMAL_SI), ("0.00050k", dec(5, -1), DECIMAL_SI),
    ("0.00500", dec(5, -3), DECIMAL_SI), ("0.05000", dec(5, -2), DECIMAL_SI), ("0.50000", dec(5, -1), DECIMAL_SI),
    ("0.5e0", dec(5, -1), DECIMAL_EXPONENT), ("0.5e-1", dec(5, -2), DECIMAL_EXPONENT),
    ("0.5e-2", dec(5, -3), DECIMAL_EXPONENT), ("10.035M", dec(10035, 3), DECIMAL_SI),
    ("1.2e3", dec(12, 2), DECIMAL_EXPONENT), ("1.3E+6", dec(13, 5), DECIMAL_EXPONENT),
    ("1.40e9", dec(14, 8), DECIMAL_EXPONENT), ("1.53E12", dec(153, 10), DECIMAL_EXPONENT),
    ("1.6e15", dec(16, 14), DECIMAL_EXPONENT), ("1.7E18", dec(17, 17), DECIMAL_EXPONENT),
    ("9.01", dec(901, -2), DECIMAL_SI), ("8.1k", dec(81, 2), DECIMAL_SI), ("7.123456M", dec(7123456, 0), DECIMAL_SI),
    ("6.987654321G", dec(6987654321, 0), DECIMAL_SI), ("5.444T", dec(5444, 9), DECIMAL_SI),
    ("40.1T", dec(401, 11), DECIMAL_SI), ("300.2T", dec(3002, 11), DECIMAL_SI), ("2.5P", dec(25, 14), DECIMAL_SI),
    ("1.01E", dec(101, 16), DECIMAL_SI),
    # Things that saturate/round
    ("3.001n", dec(4, -9), DECIMAL_SI), ("1.1E-9", dec(2, -9), DECIMAL_EXPONENT),
    ("0.0000000001", dec(1, -9), DECIMAL_SI), ("0.0000000005", dec(1, -9), DECIMAL_SI),
    ("0.00000000050", dec(1, -9), DECIMAL_SI), ("0.5e-9", dec(1, -9), DECIMAL_EXPONENT),
    ("0.9n", dec(1, -9), DECIMAL_SI), ("0.00000012345", dec(124, -9), DECIMAL_SI),
    ("0.00000012354", dec(124, -9), DECIMAL_SI), ("9Ei", MAX_ALLOWED, BINARY_SI),
    ("9223372036854775807Ki", MAX_ALLOWED, BINARY_SI), ("12E", dec(12, 18), DECIMAL_SI),
    # We'll accept fractional binary stuff, too.
    ("100.035Ki", dec(10243584, -2), BINARY_SI), ("0.5Mi", dec(512 * 1024, 0), BINARY_SI),
    ("0.05Gi", dec(536870912, -1), BINARY_SI), ("0.025Ti", dec(274877906944, -1), BINARY_SI),
    # Things written by trolls
    ("0.000000000001Ki", dec(2, -9), DECIMAL_SI),  # rounds up, changes format
    (".001", dec(1, -3), DECIMAL_SI), (".0001k", dec(100, -3), DECIMAL_SI), ("1.", dec(1, 0), DECIMAL_SI),
    ("1.G", dec(1, 9), DECIMAL_SI),
]


@pytest.mark.parametrize(("text", "amount", "fmt"), PARSE_TABLE)
def test_parse_reads_upstreams_table_with_its_format(text: str, amount: Decimal, fmt: str) -> None:
    assert parse_quantity_format(text) == (amount, fmt)


@pytest.mark.parametrize(("text", "amount", "fmt"), PARSE_TABLE)
def test_parse_reads_the_negative_and_the_explicitly_positive_of_every_entry(text: str, amount: Decimal,
                                                                            fmt: str) -> None:
    # Same test: "Try the negative version of everything", "Try everything with an explicit +".
    assert parse_quantity_format("-" + text) == (-amount, fmt)
    assert parse_quantity_format("+" + text) == (amount, fmt)


# Same test, `invalid`: every one an error. Upstream's ParseQuantity also refuses " 1" and "1 "; the API
# server trims them before (Quantity.UnmarshalJSON), and so does parse_quantity: see the next test.
INVALID = ["", "1.1.M", "1+1.0M", "0.1mi", "0.1am", "aoeu", ".5i", "1i", "-3.01i", "-3.01e-", "1e4294967297"]


@pytest.mark.parametrize("text", INVALID)
def test_parse_refuses_what_upstream_refuses_naming_the_value(text: str) -> None:
    with pytest.raises(QuantityError) as refused:
        parse_quantity(text)
    assert repr(text) in str(refused.value)


def test_surrounding_whitespace_is_trimmed_as_the_api_server_decodes_json() -> None:
    assert parse_quantity(" 1") == parse_quantity("1 ") == 1


def test_a_quantity_without_a_digit_is_refused_where_upstream_reads_zero() -> None:
    # Upstream's parseQuantityString takes ".", "+" and "-" for 0; a typo should not become nothing.
    for text in (".", "-", "+", "-.", "+."):
        with pytest.raises(QuantityError, match="quantities must match the regular expression"):
            parse_quantity(text)


def test_the_format_error_is_the_api_servers() -> None:
    with pytest.raises(QuantityError) as refused:
        parse_quantity("lots")
    assert str(refused.value) == f"{FORMAT_MESSAGE}, got 'lots'"


@pytest.mark.parametrize("value", [None, True, [], {}, float("nan"), float("inf"), Decimal("NaN")])
def test_values_that_are_no_quantity_at_all_are_refused(value: object) -> None:
    with pytest.raises(QuantityError):
        parse_quantity(value)


def test_json_numbers_are_quantities() -> None:
    assert parse_quantity(4) == 4 and parse_quantity(0.5) == Decimal("0.5") and parse_quantity(1e3) == 1000
    assert parse_quantity(Decimal("1E+3")) == 1000


# TestInterpretExponentInt32Bounds: exponents within ±(2^31-1) are read, others refused (the quantity
# itself is then refused here as too large, far past anything measured: see the module).
@pytest.mark.parametrize(("suffix", "ok"), [
    ("e14", True), ("E2147483648", False), ("E-2147483648", False), ("E4294967297", False),
    ("E8589934592", False), ("E9223372036854775807", False), ("E9223372036854775808", False),
    ("E6024865272343", False),
])
def test_exponents_past_int32_are_refused(suffix: str, ok: bool) -> None:
    if ok:
        assert parse_quantity("1" + suffix) == Decimal("1e14")
    else:
        with pytest.raises(QuantityError, match="suffix"):
            parse_quantity("1" + suffix)


def test_a_tiny_exponent_within_int32_rounds_up_to_one_nano() -> None:
    assert parse_quantity("1E-2147483647") == Decimal("1e-9")
    assert parse_quantity("-1E-2147483647") == Decimal("-1e-9")


# TestQuantityCmp
@pytest.mark.parametrize(("x", "y", "expect"), [("0", "0", 0), ("100m", "50m", 1), ("50m", "100m", -1),
                                                ("10000T", "100Gi", 1)])
def test_compare(x: str, y: str, expect: int) -> None:
    a, b = parse_quantity(x), parse_quantity(y)
    assert (a > b) - (a < b) == expect


# TestQuantityString: (amount, format, canonical text, an alternate text that reads back to it).
STRING_TABLE = [
    (dec(1024**3, 0), BINARY_SI, "1Gi", "1024Mi"), (dec(300 * 1024**2, 0), BINARY_SI, "300Mi", "307200Ki"),
    (dec(6 * 1024, 0), BINARY_SI, "6Ki", ""), (dec(1001 * 1024**3, 0), BINARY_SI, "1001Gi", "1025024Mi"),
    (dec(1024**4, 0), BINARY_SI, "1Ti", "1024Gi"), (dec(5, 0), BINARY_SI, "5", "5000m"),
    (dec(500, -3), BINARY_SI, "500m", "0.5"), (dec(1, 9), DECIMAL_SI, "1G", "1000M"),
    (dec(1000, 6), DECIMAL_SI, "1G", "0.001T"), (dec(1000000, 3), DECIMAL_SI, "1G", ""),
    (dec(1000000000, 0), DECIMAL_SI, "1G", ""), (dec(1, -3), DECIMAL_SI, "1m", "1000u"),
    (dec(80, -3), DECIMAL_SI, "80m", ""), (dec(1080, -3), DECIMAL_SI, "1080m", "1.08"),
    (dec(108, -2), DECIMAL_SI, "1080m", "1080000000n"), (dec(10800, -4), DECIMAL_SI, "1080m", ""),
    (dec(300, 6), DECIMAL_SI, "300M", ""), (dec(1, 12), DECIMAL_SI, "1T", ""),
    (dec(1, 18), DECIMAL_SI, "1E", ""), (dec(1, 21), DECIMAL_SI, "1e21", "1000E"),
    (dec(5, 21), DECIMAL_SI, "5e21", "5000E"), (dec(1, 24), DECIMAL_SI, "1e24", "1000000E"),
    (dec(1, 70), BINARY_SI, "10e69", ""), (dec(2, 70), BINARY_SI, "20e69", ""), (dec(1, 72), BINARY_SI, "1e72", ""),
    (dec(1234567, 6), DECIMAL_SI, "1234567M", ""), (dec(1234567, -3), BINARY_SI, "1234567m", ""),
    (dec(3, 3), DECIMAL_SI, "3k", ""), (dec(1025, 0), BINARY_SI, "1025", ""), (dec(0, 0), DECIMAL_SI, "0", ""),
    (dec(0, 0), BINARY_SI, "0", ""), (dec(1, 9), DECIMAL_EXPONENT, "1e9", ".001e12"),
    (dec(1, -3), DECIMAL_EXPONENT, "1e-3", "0.001e0"), (dec(1, -9), DECIMAL_EXPONENT, "1e-9", "1000e-12"),
    (dec(80, -3), DECIMAL_EXPONENT, "80e-3", ""), (dec(300, 6), DECIMAL_EXPONENT, "300e6", ""),
    (dec(1, 12), DECIMAL_EXPONENT, "1e12", ""), (dec(1, 3), DECIMAL_EXPONENT, "1e3", ""),
    (dec(3, 3), DECIMAL_EXPONENT, "3e3", ""), (dec(0, 0), DECIMAL_EXPONENT, "0", "00"),
    (dec(1, -9), DECIMAL_SI, "1n", ""), (dec(80, -9), DECIMAL_SI, "80n", ""), (dec(1080, -9), DECIMAL_SI, "1080n", ""),
    (dec(108, -8), DECIMAL_SI, "1080n", ""), (dec(10800, -10), DECIMAL_SI, "1080n", ""),
    (dec(1, -6), DECIMAL_SI, "1u", ""), (dec(80, -6), DECIMAL_SI, "80u", ""), (dec(1080, -6), DECIMAL_SI, "1080u", ""),
]


@pytest.mark.parametrize(("amount", "fmt", "text", "alternate"), STRING_TABLE)
def test_format_writes_upstreams_canonical_text_and_reads_it_back(amount: Decimal, fmt: str, text: str,
                                                                  alternate: str) -> None:
    assert format_quantity(amount, fmt) == text
    assert parse_quantity(text) == amount
    if alternate:
        assert canonical_quantity(alternate) == text
    if amount:
        assert format_quantity(-amount, fmt) == "-" + text  # same test: the negated table


def test_binary_past_ei_writes_the_exact_decimal_integer() -> None:
    # TestBinarySIPastEiArithmeticRoundTrip, TestBinarySIZeroExponentString, TestQuantityStringBelowNano.
    assert format_quantity(Decimal(2**70), BINARY_SI) == "1180591620717411303424"
    assert parse_quantity(format_quantity(Decimal(2**70), BINARY_SI)) == 2**70
    assert format_quantity(2000, BINARY_SI) == "2000" and format_quantity(-2000, BINARY_SI) == "-2000"
    assert format_quantity(dec(1, -12)) == "1e-12" and format_quantity(dec(1, -10)) == "100e-12"


# TestQuantityParseEmit
@pytest.mark.parametrize(("text", "emitted"), [
    ("1Ki", "1Ki"), ("1Mi", "1Mi"), ("1Gi", "1Gi"), ("1024Mi", "1Gi"), ("1000M", "1G"), (".001Ki", "1024m"),
    (".000001Ki", "1024u"), (".000000001Ki", "1024n"), (".000000000001Ki", "2n"),
])
def test_parse_then_emit(text: str, emitted: str) -> None:
    assert canonical_quantity(text) == emitted
    assert canonical_quantity("-" + text) == "-" + emitted


# Properties (in the spirit of upstream's fuzzed round trips).
amounts = st.builds(lambda i, e: Decimal(i).scaleb(e), st.integers(-(10**18), 10**18), st.integers(-9, 30))


@given(amounts, st.sampled_from([DECIMAL_SI, BINARY_SI, DECIMAL_EXPONENT]))
def test_every_amount_of_whole_nanos_reads_back_from_its_text_in_every_format(amount: Decimal, fmt: str) -> None:
    assume(fmt != BINARY_SI or abs(amount) <= MAX_ALLOWED)  # binary amounts are capped at 2^63-1 on reading
    assert parse_quantity(format_quantity(amount, fmt)) == amount


@given(st.from_regex(r"\A[+-]?[0-9]{1,12}(\.[0-9]{0,12})?(Ki|Mi|Gi|Ti|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]{1,2})?\Z"))
def test_every_well_formed_text_parses_to_whole_nanos_that_canonicalise_stably(text: str) -> None:
    amount, fmt = parse_quantity_format(text)
    assert amount.as_tuple().exponent >= -9  # whole nanos
    canonical = format_quantity(amount, fmt)
    assert canonical_quantity(canonical) == canonical
    assert parse_quantity(canonical) == amount
