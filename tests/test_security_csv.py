"""The shared CSV helper (common/csv.py): formula-injection escaping and streaming."""
import csv
import datetime
import io
from decimal import Decimal

import pytest

from common.csv import csv_lines, csv_response, escape_cell


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx", "\nx", "\0x", "=HYPERLINK(\"x\")"])
def test_risky_cells_get_a_leading_quote(text):
    assert escape_cell(text) == "'" + text


@pytest.mark.parametrize("value, expected", [
    ("plain", "plain"), ("", ""), (None, ""), (True, "yes"), (False, "no"), (3, "3"), (Decimal("1.50"), "1.50"),
    (Decimal("-2"), "'-2"), ("a=b", "a=b"), ("'quoted", "'quoted"),
    (datetime.datetime(2025, 1, 2, 3, 4, 5, tzinfo=datetime.timezone.utc), "2025-01-02T03:04:05+00:00"),
])
def test_other_cells(value, expected):
    assert escape_cell(value) == expected


def test_lines_round_trip_through_a_csv_reader():
    text = "".join(csv_lines(["A", "=B"], [["x,y", "-3"], ['say "hi"', None]]))
    assert list(csv.reader(io.StringIO(text))) == [["A", "'=B"], ["x,y", "'-3"], ['say "hi"', ""]]


def test_response_streams_and_names_the_file_safely():
    consumed = []

    def rows():
        for i in range(3):
            consumed.append(i)
            yield [i]

    response = csv_response('nodes"; evil.csv', ["n"], rows())
    assert consumed == []  # nothing is built before the response is read
    assert response["Content-Disposition"] == 'attachment; filename="nodesevil.csv"'
    assert b"".join(response.streaming_content).decode().splitlines() == ["n", "0", "1", "2"]
