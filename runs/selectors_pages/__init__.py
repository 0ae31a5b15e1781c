"""Page selectors: the reads behind the console pages, one context function per partial.

Each `*_context` function builds the whole context of one named partial, so the page, the htmx
fragment view and the WebSocket consumer render identical HTML from it. Every function runs a
constant number of queries, whatever the size of the page. No HTML is built here: values go to
templates, which escape them.
"""

from runs.selectors_pages.run_list import (
    CURSOR_RE,
    EPOCH,
    LIST_FIELDS,
    MAX_PAGE_SIZE,
    PAGE_SIZE,
    RunFilters,
    cursor_for,
    cursor_parse,
    filters_replace,
    run_row_context,
    runs_list_context,
)
from runs.selectors_pages.run_page import (
    BASE64_RE,
    INLINE_IMAGE_TYPES,
    LONG_JSON_LINES,
    LONG_TEXT,
    PARTIALS,
    run_approvals_context,
    run_header_context,
    run_page_context,
    run_page_run,
    run_step_context,
    run_steps_context,
    run_todos_context,
    run_usage_context,
    run_verdicts_context,
)

__all__ = [
    "PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "CURSOR_RE",
    "EPOCH",
    "LIST_FIELDS",
    "RunFilters",
    "cursor_for",
    "cursor_parse",
    "runs_list_context",
    "run_row_context",
    "filters_replace",
    "LONG_TEXT",
    "LONG_JSON_LINES",
    "INLINE_IMAGE_TYPES",
    "BASE64_RE",
    "run_page_run",
    "run_header_context",
    "run_usage_context",
    "run_steps_context",
    "run_step_context",
    "run_todos_context",
    "run_verdicts_context",
    "run_approvals_context",
    "run_page_context",
    "PARTIALS",
]
