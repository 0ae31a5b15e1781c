"""Every CSV the product writes goes through here (the audit export, the usage reports of the
API and the pages, a budget's burn table), so none can carry a spreadsheet formula.

A text cell that begins with `=`, `+`, `-`, `@`, a tab or a carriage return is read by
spreadsheets as a formula (OWASP "CSV Injection"); such a cell gets a leading `'`, which
spreadsheets show as text and do not evaluate. Only text is changed: a number (an int, a float,
a Decimal) is written as the number it is, so a genuine -5 stays a number. Text that merely
looks numeric (`"-5"`) is neutralised too: a column of ids or names must never become a
formula, whatever its value. (defusedcsv does the same for a different set of characters but
also wraps the cell in quotes and rewrites `|`; these few lines say exactly what we change.)
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value):
    """The cell as a spreadsheet will read it safely: text starting like a formula gets `'`."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def csv_text(rows: Iterable[Iterable]) -> str:
    """The rows as CSV text (CRLF line ends), every cell through `csv_cell`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\r\n")
    for row in rows:
        writer.writerow([csv_cell(value) for value in row])
    return out.getvalue()
