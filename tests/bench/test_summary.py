"""`make bench` rewrites the generated summary of docs/benchmarks.md (bench/__main__.py): the
figures each benchmark recorded, merged over the earlier runs of the others, and nothing else
of the document."""

import importlib
import json

import pytest

bench_main = importlib.import_module("bench.__main__")
support = importlib.import_module("bench._support")

MACHINE = {"cpu": "Test CPU", "cpus": 2, "python": "3.11.7", "postgresql": "15.8"}


def run(rows, at="2026-12-04 09:00", failed=None):
    return {"at": at, "load_before": 1.0, "load_after": 2.5, "rows": rows, "failed": failed}


def row(figure, value, **kw):
    base = {"baseline": "—", "ratio": None, "target": "—", "met": None}
    return {"figure": figure, "value": value, **base, **kw}


DOC = "# Benchmarks\n\nIntro.\n\n## Ingest\n\nHand-written analysis | with a pipe.\n"


def test_the_first_run_puts_the_block_after_the_title_and_keeps_the_rest():
    runs = {"decisions": run([row("sent → returned", "43.2 / 97.0 ms", ratio=1.5, met=False)])}
    out = bench_main.rewrite(DOC, runs, MACHINE)
    assert out.startswith("# Benchmarks\n\n" + bench_main.BEGIN)
    assert out.endswith("Intro.\n\n## Ingest\n\nHand-written analysis | with a pipe.\n")
    assert "| decisions | sent → returned | 43.2 / 97.0 ms | — | 1.50 | — | **no** |" in out
    assert "2026-12-04 09:00, 1.0 → 2.5" in out
    assert "2 × Test CPU; python 3.11.7, postgresql 15.8" in out


def test_a_later_run_replaces_its_own_rows_and_keeps_the_others():
    first = bench_main.rewrite(
        DOC,
        {
            "decisions": run([row("old decision figure", "50 ms")]),
            "live": run([row("idle CPU", "2 %", met=True)]),
        },
        MACHINE,
    )
    second = bench_main.rewrite(
        first,
        {"decisions": run([row("new decision figure", "40 ms")], at="2026-12-05 10:00")},
        MACHINE,
    )
    assert "old decision figure" not in second
    assert "| decisions | new decision figure | 40 ms |" in second
    assert "| live | idle CPU | 2 % | — | — | — | yes | 2026-12-04 09:00" in second
    assert second.count(bench_main.BEGIN) == second.count(bench_main.END) == 1
    assert second.endswith("Hand-written analysis | with a pipe.\n")
    data = bench_main.previous_data(second)
    assert set(data["benches"]) == {"decisions", "live"}


def test_a_failed_benchmark_says_so_in_its_row():
    out = bench_main.rewrite(DOC, {"notify": run([], failed="it reported no figure")}, MACHINE)
    assert "| notify | (failed: it reported no figure) |" in out


def test_cells_cannot_break_the_table():
    out = bench_main.summary_markdown(
        {"machine": MACHINE, "benches": {"x": run([row("a | b\nc", "1 ms")])}}
    )
    assert "| x | a \\| b c | 1 ms |" in out


def test_record_writes_a_json_line_for_the_runner(tmp_path, monkeypatch, capsys):
    path = tmp_path / "rows.jsonl"
    monkeypatch.setenv("BENCH_RESULTS", str(path))
    support.record("budget_check", "p50", "10.6 ms", baseline="GET 9.2 ms", ratio=1.16,
                   target="p50 ≤ 5 ms", met=False)  # fmt: skip
    (line,) = path.read_text().splitlines()
    assert json.loads(line) == {
        "bench": "budget_check", "figure": "p50", "value": "10.6 ms", "baseline": "GET 9.2 ms",
        "ratio": 1.16, "target": "p50 ≤ 5 ms", "met": False,
    }  # fmt: skip
    assert "target p50 ≤ 5 ms: MISSED" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("env", "quick", "expected"),
    [(None, False, 500), (None, True, 40), ("7", True, 7), ("7", False, 7)],
)
def test_sizes_are_full_quick_or_what_the_environment_says(monkeypatch, env, quick, expected):
    monkeypatch.setattr(support, "QUICK", quick)
    if env is None:
        monkeypatch.delenv("BENCH_X", raising=False)
    else:
        monkeypatch.setenv("BENCH_X", env)
    assert support.size("BENCH_X", 500, 40) == expected


def test_unknown_options_and_benchmarks_are_refused():
    with pytest.raises(SystemExit, match="unknown option"):
        bench_main.main(["--fast"])
    with pytest.raises(SystemExit, match="unknown benchmark"):
        bench_main.main(["nope"])
