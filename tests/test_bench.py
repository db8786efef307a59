"""The benchmark: formulas, sweep, the call-count budget and its agreement across
ranks, writers, plot, the #wrong check, and one tiny end-to-end run with 2
processes."""

from __future__ import annotations

import csv
import json
import math
import time
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist

import ringcoll.bench as bench
from ringcoll.bench import main, records, report, runner
from tests import mp


def test_bus_factors_match_nccl_tests():
    assert records.bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert records.bus_factor("all_reduce", 2) == pytest.approx(1.0)
    assert records.bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert records.bus_factor("reduce_scatter", 3) == pytest.approx(2 / 3)
    assert records.bus_factor("broadcast", 8) == 1.0
    algbw, busbw = records.bandwidths("all_reduce", 1_000_000_000, 2.0, 4)
    assert algbw == pytest.approx(0.5) and busbw == pytest.approx(0.75)
    for c in ("gather", "scatter", "all_to_all"):
        assert records.bus_factor(c, 4) == pytest.approx(0.75), c
    assert records.bus_factor("reduce", 8) == 1.0
    with pytest.raises(ValueError):
        records.bus_factor("alltoall", 2)


def test_sweep_and_sizes():
    assert records.sweep(8, 64, 2) == [8, 16, 32, 64]
    assert records.sweep(8, 100, 4) == [8, 32]
    assert records.sweep(1, 1, 2) == [1]
    assert records.parse_size("64M") == 64 << 20 and records.parse_size("1K") == 1024
    assert records.parse_size("8") == 8 and records.parse_size("2G") == 2 << 30
    with pytest.raises(ValueError):
        records.sweep(64, 8, 2)
    ag = records.RECORDS["all_gather"]
    assert records.count_for(ag, 8, 3, 4) == 3  # at least one element per rank
    assert records.count_for(ag, 100, 3, 4) == 24
    assert records.count_for(records.RECORDS["all_reduce"], 100, 3, 4) == 25


@pytest.mark.parametrize("op", ["sum", "prod", "min", "max", "avg"])
def test_tiled_inputs_equal_the_element_by_element_definition(op):
    def direct(rank, p, n, salt=0):  # the definition, one element at a time
        vals = []
        for i in range(salt, salt + n):
            vals.append(1 + ((i + rank) % 4 == 0) if op == "prod" else
                        p * ((3 * i + rank) % 4 + 1) if op == "avg" else (7 * i + 3 * rank) % 5 + 1)
        return torch.tensor(vals, dtype=torch.float64)

    for p in (1, 2, 3, 7):
        for n in (0, 1, p - 1, p + 1, records.PERIOD, records.PERIOD + 1, 2 * records.PERIOD,
                  3 * records.PERIOD + 7):
            ins = [direct(r, p, n) for r in range(p)]
            for r in range(p):
                assert torch.equal(records.element_input(r, p, n, op), ins[r]), (p, n, r)
                assert torch.equal(records.element_input(r, p, n, op, salt=r), direct(r, p, n, r))
            assert torch.equal(records.reduced_input(p, n, op), records.reduce_ref(ins, op, p))


def test_measurement_is_median_of_runs_with_min_max_spread():
    m = records.measurement("all_reduce", 8_000, 2, [2e-3, 1e-3, 4e-3], calls=7, wrong=0)
    assert m["time_us"] == pytest.approx(2000) and m["calls"] == 7
    assert (m["time_min_us"], m["time_max_us"]) == (pytest.approx(1000), pytest.approx(4000))
    assert m["runs_us"] == [pytest.approx(2000), pytest.approx(1000), pytest.approx(4000)]
    assert m["busbw"] == pytest.approx(8_000 / 2e-3 / 1e9)
    assert m["busbw_min"] == pytest.approx(8_000 / 4e-3 / 1e9)  # the slowest run
    assert m["busbw_max"] == pytest.approx(8_000 / 1e-3 / 1e9)
    with pytest.raises(ValueError):
        records.measurement("all_reduce", 8, 2, [], calls=1, wrong=0)


def test_calls_per_run_fills_the_budget_within_bounds():
    assert runner.calls_per_run(1.0, 5, 1e-3, 5, 10_000) == 200
    assert runner.calls_per_run(1.0, 5, 1e-3, 5, 100) == 100  # the cap
    assert runner.calls_per_run(1.0, 5, 0.5, 5, 100) == 5  # the minimum beats the budget
    assert runner.calls_per_run(0.0, 5, 1e-3, 3, 100) == 3
    assert runner.calls_per_run(1.0, 5, 0.0, 3, 100) == 100  # unmeasurably fast
    assert runner.calls_per_run(1.0, 5, math.inf, 3, 100) == 100
    counts = [runner.calls_per_run(1.0, 3, t, 1, 10**6) for t in (1e-6, 1e-5, 1e-4, 1e-3, 1e-1)]
    assert counts == sorted(counts, reverse=True) and counts[0] > counts[-1]


class _Done:
    def wait(self):
        return True


def _fake_case(seconds, log, fast_first=0):
    """A stand-in collective that takes `seconds` on this rank (after `fast_first`
    instant calls) and counts its calls (it never communicates, so a count that
    differs between ranks shows as a difference in `log`, not as a hang)."""
    def run():
        log.append(1)
        if seconds and len(log) > fast_first:
            time.sleep(seconds)
        return _Done()
    return records.Case(run, torch.zeros(1), None, lambda: None)


def ranks_agree_on_counts(rank, p):
    proposals = runner.agree_calls([10 + 5 * rank, 100 - rank], None)
    worst = runner.slowest_rank(torch.tensor([[float(rank), 3.0 - rank]]), None)
    slow, fast = [], []
    # rank 1 is 2 ms per call, rank 0 free: rank 1's calibration sets the count
    cases = {"slow": _fake_case(2e-3 * rank, slow), "fast": _fake_case(0, fast)}
    args = SimpleNamespace(warmup=3, budget=0.04, runs=2, iters=2, max_calls=500)
    got = runner.measure(cases, args, "cpu", None)
    # fast through the warm-up, then 2 ms a call: run 1 takes the cap (20 calls,
    # >= 40 ms of a 0.1 s budget); runs 2 and 3 must then use the new estimate and
    # what is left of the budget (<= 15 calls, then <= 20), never 20 + 20 + 20
    late = []
    args = SimpleNamespace(warmup=3, budget=0.1, runs=3, iters=2, max_calls=20)
    _, late_calls = runner.measure({"late": _fake_case(2e-3, late, 3)}, args, "cpu", None)["late"]
    return proposals, worst.tolist(), len(slow), len(fast), got, late_calls


def rotated_order():
    """The order three backends run in when the caller shifts the rotation by 1
    (ringcoll.model's passes): warm-ups in order, then run 0 from b, run 1 from c."""
    order = []

    def case(name):
        return records.Case(lambda: order.append(name) or _Done(), torch.zeros(1), None,
                            lambda: None)

    args = SimpleNamespace(warmup=1, budget=0.0, runs=2, iters=1, max_calls=1, rotation=1)
    runner.measure({n: case(n) for n in "abc"}, args, "cpu", None)
    return "".join(order)


def bad_transport_reaches_ringcoll():
    try:
        runner.make_groups(["ringcoll"], "cpu", transport="no-such-transport")
    except Exception as e:  # noqa: BLE001 - whatever ringcoll raises for a bad knob
        return str(e)
    return None


def runner_in_a_world(rank, p):
    return ranks_agree_on_counts(rank, p), bad_transport_reaches_ringcoll(), rotated_order()


@pytest.fixture(scope="module")
def world_results():
    """One 2-rank gloo world for the runner's tests (a world costs seconds to start)."""
    return mp.run_world(2, runner_in_a_world, init_backend="gloo")


def test_transport_is_passed_to_ringcoll(world_results):
    for _, err, _ in world_results:
        assert err is not None and "no-such-transport" in err


def test_a_shifted_rotation_starts_later_in_the_order(world_results):
    for _, _, order in world_results:
        assert order == "abc" + "bca" + "cab"


def test_ranks_agree_on_call_counts_and_report_the_slowest(world_results):
    results = [agreement for agreement, _, _ in world_results]
    for proposals, worst, _, _, _, late_calls in results:
        assert proposals == [10, 99]
        assert worst == [[1.0, 3.0]]
        assert 20 + 2 + 2 <= late_calls < 3 * 20  # a slow run shrinks the runs after it
    (_, _, slow0, fast0, got0, _), (_, _, slow1, fast1, got1, _) = results
    assert (slow0, fast0) == (slow1, fast1)  # every rank made the same number of calls
    assert got0 == got1
    (slow_runs, slow_calls), (fast_runs, fast_calls) = got0["slow"], got0["fast"]
    assert 2 * 2 <= slow_calls <= 20 and fast_calls == 2 * 500  # 0.04 s / 2 ms; the cap
    assert slow0 == 3 + slow_calls and fast0 == 3 + fast_calls
    assert len(slow_runs) == 2 and min(slow_runs) >= 2e-3  # rank 1's time, not rank 0's
    assert max(fast_runs) < 1e-3


def test_memcpy_reference_is_a_rate_and_restores_threads():
    threads = torch.get_num_threads()
    gbps = runner.memcpy_gbps(nbytes=4 << 20, repeats=3)
    assert 0.1 < gbps < 1000 and torch.get_num_threads() == threads


def _m(t_us, runs, wrong=0):
    return records.measurement("all_reduce", 1000, 2, [r * 1e-6 for r in runs], calls=10,
                               wrong=wrong) | {"time_us": t_us}


def _rows():
    rows = []
    for backend, t, spread in (("ringcoll", 1.0, (0.5, 1.0, 1.5)), ("gloo", 2.0, (1, 1, 1))):
        for size in (8, 1024):
            runs = [t * size * k for k in spread]
            rows.append({"backend": backend, "collective": "all_reduce", "nproc": 2,
                         "device": "cpu", "transport": "auto" if backend == "ringcoll" else None,
                         "dtype": "float32", "op": "sum", "size": size, "count": size // 4,
                         "root": -1, "oop": None, "ip": _m(t * size, runs)})
            rows.append({"backend": backend, "collective": "all_gather", "nproc": 2,
                         "device": "cpu", "transport": "auto" if backend == "ringcoll" else None,
                         "dtype": "float32", "op": "none", "size": size, "count": size // 4,
                         "root": -1, "oop": _m(t * size, runs, 3), "ip": _m(t * size, runs)})
    return rows


def test_tables_and_comparison_with_spread():
    rows = _rows()
    text = report.tables(rows)
    assert "# ringcoll (transport auto) all_reduce, 2 processes, cpu" in text
    assert "# gloo all_reduce, 2 processes, cpu" in text
    assert "#wrong" in text and "min-max(us)" in text and "in-place" in text
    assert "4.0-12.0" in text  # ringcoll 8 B: runs 4, 8, 12 us
    comp = report.comparison(rows)
    assert len(comp) == 4
    assert all(c["ratio"] == pytest.approx(2.0) for c in comp)  # ringcoll twice as fast
    # paired runs: gloo 2t over ringcoll (0.5t, t, 1.5t) -> 4, 2, 4/3
    assert all(c["ratio_min"] == pytest.approx(4 / 3) for c in comp)
    assert all(c["ratio_max"] == pytest.approx(4.0) for c in comp)
    table = report.comparison_table(rows)
    assert "1.33-4.00" in table and "above 1, ringcoll is faster" in table.splitlines()[0]


def test_the_ratio_heading_says_which_ringcoll_is_faster():
    """A baseline that is another ringcoll algorithm (ringcoll+algo=pyring beside
    --algo ring): above 1 is that algorithm being slower than the ring, which the
    heading says, naming both (it said "above 1, ringcoll is faster")."""
    rows = [dict(r, backend="ringcoll+algo=pyring", transport="auto") if r["backend"] == "gloo"
            else r for r in _rows()]
    head = report.comparison_table(rows, algo="ring").splitlines()[0]
    assert "ratio = baseline time / ringcoll (ring) time" in head, head
    assert "above 1, ringcoll (ring) is faster than the baseline" in head, head
    assert "ringcoll+algo=pyring is ringcoll too: above 1, it is slower than ringcoll (ring)" \
        in head, head
    plain = report.comparison_table(_rows()).splitlines()[0]  # gloo: no such clause
    assert "ringcoll too" not in plain and "above 1, ringcoll is faster" in plain, plain


def test_graph_rows_are_compared_within_their_mode():
    """A graph-mode row (--graph) is its own table and is compared only with the
    baseline's graph row of the same point, never with an eager one."""
    rows = _rows()
    # the graph mode: ringcoll 4x faster than in its eager rows, gloo unchanged
    graphs = [dict(r, graph=5, ip=r["ip"] and dict(r["ip"], time_us=r["ip"]["time_us"] / 4,
                                                  runs_us=[t / 4 for t in r["ip"]["runs_us"]])
                   if r["backend"] == "ringcoll" else r["ip"]) for r in rows]
    comp = report.comparison(rows + graphs)
    eager = [c for c in comp if c["mode"] == "eager"]
    graph = [c for c in comp if c["mode"] == "graph"]
    assert len(eager) == len(graph) == 4, comp
    assert all(c["ratio"] == pytest.approx(2.0) for c in eager)
    assert all(c["ratio"] == pytest.approx(8.0) for c in graph), graph
    text = report.tables(rows + graphs)
    assert ("# ringcoll (transport auto) all_reduce, 2 processes, cpu; graph mode: 5 calls "
            "captured, timed per replay / 5") in text
    assert " graph      gloo" in report.comparison_table(rows + graphs)


def test_counts_for_gives_each_measured_size_one_row():
    """Two sizes of a sweep that round to one element count are one point: the size
    nearest the bytes measured runs it, the other says where its point is (p = 4
    printed all-gather's and reduce-scatter's 16 B row twice: 8 B rounds up to one
    float32 per rank)."""
    sizes = records.sweep(8, 64, 2)
    for coll in ("all_gather", "reduce_scatter"):
        plan = records.counts_for(records.RECORDS[coll], sizes, 4, 4, "float32")
        assert {s: c for s, (c, _) in plan.items()} == {8: 4, 16: 4, 32: 8, 64: 16}
        assert [s for s, (_, why) in plan.items() if why] == [8]
        assert plan[8][1] == ("at p=4 8 B rounds up to 16 B (one float32 element per rank "
                              "at least), measured in the 16 B row")
    # p = 3: 8 B -> 12 B and 16 B -> 12 B; the tie goes to the smaller size
    plan = records.counts_for(records.RECORDS["all_gather"], sizes, 3, 4, "float32")
    assert plan[8] == (3, "") and plan[32] == (6, "") and plan[64] == (15, "")
    assert "16 B rounds down to 12 B (a whole number of float32 elements per rank)" \
        in plan[16][1]
    # all-reduce: one element per count, no per-rank rounding; 1 and 2 B round up to 4
    plan = records.counts_for(records.RECORDS["all_reduce"], [1, 2, 4, 8], 4, 4)
    assert plan[4] == (1, "") and plan[8] == (2, "")
    assert plan[1][1].startswith("at p=4 1 B rounds up to 4 B (one element at least)")
    assert plan[2][1].startswith("at p=4 2 B rounds up to 4 B")
    assert all(why == "" for _, why in records.counts_for(
        records.RECORDS["all_gather"], sizes, 2, 4).values())


def test_legend_explains_every_column_and_factor():
    rows = _rows()
    text = report.legend(rows)
    for word in ("size ", "count ", "type ", "redop", "root ", "-1: the collective has no root",
                 "out-of-place | in-place", "time(us)", "min-max(us)", "algbw ", "busbw ",
                 "#wrong", "higher is better", "lower is better"):
        assert word in text, word
    assert "all_reduce 2(p-1)/p (1.00 at p=2)" in text
    assert "all_gather (p-1)/p (0.50 at p=2)" in text
    assert "reduce_scatter (p-1)/p" not in text  # only the collectives of the run


def test_a_size_that_is_another_rows_prints_its_reason():
    rows = _rows()
    for backend in ("ringcoll", "gloo"):
        rows.append({"backend": backend, "collective": "all_gather", "nproc": 2,
                     "device": "cpu", "transport": None, "dtype": "float32", "op": "none",
                     "size": 4, "count": None, "root": -1, "oop": None, "ip": None,
                     "skipped": "at p=2 4 B rounds up to 8 B"})
    text = report.tables(rows)
    assert text.count("# 4 B: skipped: at p=2 4 B rounds up to 8 B") == 2
    assert sum(1 for ln in text.splitlines() if ln.split()[:2] == ["4", "-"]) == 2
    table = report.comparison_table(rows)
    assert "skipped: at p=2 4 B rounds up to 8 B" in table
    assert len(report.comparison(rows)) == 4  # no ratio for it


def test_size_labels_read_in_binary_units():
    assert [records.human(n) for n in (8, 1024, 1536, 64 << 20, 2 << 30)] == \
        ["8 B", "1 KiB", "1.5 KiB", "64 MiB", "2 GiB"]
    sweep = records.sweep(8, 64 << 20, 2)
    ticks = report.size_ticks(sweep)
    assert ticks[0] == 8 and ticks[-1] == 64 << 20 and len(ticks) <= 10
    assert report.size_ticks([8, 16, 8]) == [8, 16]


def test_plot_axis_labels(tmp_path, monkeypatch):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    saved = []
    monkeypatch.setattr(plt, "close", lambda fig: saved.append(fig))
    report.write_plot(tmp_path / "r.png", _rows(), title="t")
    fig = saved[0]
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["8 B", "1 KiB"]
    assert "higher is better" in ax.get_ylabel()
    assert "higher is better" in fig._suptitle.get_text()


def test_ratio_spread_pairs_runs_or_falls_back_to_widest_bounds():
    assert report.ratio_spread([2, 4], [1, 4]) == (1.0, 2.0)
    assert report.ratio_spread([2, 4], [1, 2, 4]) == (0.5, 4.0)
    assert all(math.isnan(x) for x in report.ratio_spread([], [1]))


def test_json_csv_plot(tmp_path):
    rows = _rows()
    report.write_json(tmp_path / "r.json", rows, {"command": "x", "memcpy_gbps": 10.0})
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["meta"]["memcpy_gbps"] == 10.0 and len(data["results"]) == len(rows)
    assert len(data["comparison"]) == 4 and "ratio_min" in data["comparison"][0]
    assert len(data["results"][0]["ip"]["runs_us"]) == 3
    report.write_csv(tmp_path / "r.csv", rows)
    with open(tmp_path / "r.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and table[1]["oop_wrong"] == "3"
    assert table[0]["oop_time_us"] == ""  # all_reduce has no out-of-place
    assert float(table[0]["ip_time_min_us"]) == pytest.approx(4.0)
    assert float(table[0]["ip_busbw_min"]) < float(table[0]["ip_busbw"])
    assert table[0]["transport"] == "auto" and table[4]["transport"] == ""  # gloo
    report.write_plot(tmp_path / "r.png", rows, memcpy_gbps=10.0)
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_panels_and_bands():
    panels = report.plot_series(_rows())
    assert list(panels) == ["all_reduce", "all_gather"]  # sweep order, one panel each
    for series in panels.values():
        assert [s["backend"] for s in series] == ["ringcoll", "gloo"]
        for s in series:
            assert s["sizes"] == [8, 1024]
            assert all(lo <= b <= hi for lo, b, hi in zip(s["lo"], s["busbw"], s["hi"]))
    ring = panels["all_reduce"][0]
    assert ring["lo"][0] < ring["busbw"][0] < ring["hi"][0]  # ringcoll's runs spread


def _cases(rank, p, count=None):
    """Every record's case in every placement it has: {(name, inplace): case}."""
    return {(name, inplace): case for name, rec in records.RECORDS.items()
            for inplace in (True, False)
            if (case := rec.build(rank, p, count or 6 * p, torch.float32, "sum", "cpu",
                                  inplace, None)) is not None}


def corrupted_output_is_counted(rank, p):
    out = {}
    for key, case in _cases(rank, p).items():
        case.run()
        if case.expected is None:  # reduce's and gather's other ranks: no result
            continue
        clean = records.count_wrong(case.output, case.expected)
        case.output.view(-1)[0] += 1  # one wrong element
        out[key] = (clean, records.count_wrong(case.output, case.expected))
    return out


def test_check_catches_a_wrong_result():
    res = mp.run_world(3, corrupted_output_is_counted)
    for per_rank in res:
        for name, (clean, corrupted) in per_rank.items():
            assert clean == 0, name
            assert corrupted == 1, name
    # every collective, each placement torch has; the root alone has reduce's and
    # gather's result
    assert {k[0] for k in res[0]} == set(records.RECORDS)
    assert {k[0] for k in res[1]} == set(records.RECORDS) - {"reduce", "gather"}


def future_warnings_of_each_record(rank, p):
    """The FutureWarnings (torch's deprecated names) each record's call prints."""
    import warnings

    out = {}
    for (name, _), case in _cases(rank, p).items():
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            case.run()
        out.setdefault(name, []).extend(str(w.message) for w in seen
                                        if issubclass(w.category, FutureWarning))
    return out


def test_records_call_no_deprecated_torch_name():
    """`python -m ringcoll.bench` prints no FutureWarning: the records call torch's
    current names (all_gather_single, reduce_scatter_single)."""
    for per_rank in mp.run_world(2, future_warnings_of_each_record):
        assert per_rank == {name: [] for name in records.RECORDS}, per_rank


def test_end_to_end_tiny(tmp_path, capsys):
    rc = main(["-b", "8", "-e", "1K", "-f", "128", "--nproc", "2", "--budget", "0.01",
               "-n", "3", "-R", "2", "-w", "1", "--transport", "gloo",
               "--json", str(tmp_path / "b.json"), "--csv", str(tmp_path / "b.csv"),
               "--plot", str(tmp_path / "b.png")])
    assert rc == 0
    out = capsys.readouterr().out
    assert "single-core memcpy" in out and "min-max" in out
    for coll in ("all_reduce", "reduce_scatter", "all_gather"):
        assert f"# ringcoll (transport gloo) {coll}, 2 processes, cpu" in out
        assert f"# gloo {coll}, 2 processes, cpu" in out
    data = json.loads((tmp_path / "b.json").read_text())
    assert data["meta"]["transport"] == "gloo" and data["meta"]["memcpy_gbps"] > 0
    assert {r["size"] for r in data["results"]} >= {8, 1024}
    ms = [r[k] for r in data["results"] for k in ("oop", "ip") if r[k]]
    assert len(ms) == 2 * 2 * 5  # 2 backends x 2 sizes x (1 + 2 + 2 placements)
    assert all(m["wrong"] == 0 and m["calls"] >= 2 * 3 and len(m["runs_us"]) == 2 for m in ms)
    assert all(m["time_min_us"] <= m["time_us"] <= m["time_max_us"] for m in ms)
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_every_collective_end_to_end(tmp_path, capsys):
    """--collectives all: broadcast, reduce, gather, scatter and all-to-all beside
    the first three, ringcoll and gloo, exact (a table and a plot panel each), at
    p = 3 and sizes that do not divide evenly."""
    rc = main(["-b", "12", "-e", "6K", "-f", "22", "--nproc", "3", "--budget", "0.01",
               "-n", "2", "-R", "2", "-w", "1", "--collectives", "all", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    for coll in records.RECORDS:
        assert f"# ringcoll (transport auto) {coll}, 3 processes, cpu" in out, coll
        assert f"# gloo {coll}, 3 processes, cpu" in out, coll
    data = json.loads((tmp_path / "ringcoll-bench.json").read_text())
    rows = data["results"]
    assert {r["collective"] for r in rows} == set(records.RECORDS)
    ms = [(r["collective"], r[k]) for r in rows for k in ("oop", "ip") if r[k]]
    assert all(m["wrong"] == 0 for _, m in ms), [c for c, m in ms if m["wrong"]]
    assert {r["root"] for r in rows if records.RECORDS[r["collective"]].rooted} == {0}
    assert set(report.plot_series(rows)) == set(records.RECORDS)
    assert (tmp_path / "ringcoll-bench.png").read_bytes()[:4] == b"\x89PNG"


def test_no_size_is_measured_twice(tmp_path, capsys):
    """At p = 3 all-gather's 8 B and 16 B steps both round to 3 float32 elements
    (12 B): one row measures it, the other says so, in the tables and the JSON."""
    rc = main(["-b", "8", "-e", "16", "-f", "2", "--nproc", "3", "--budget", "0.01",
               "-n", "2", "-R", "1", "-w", "1", "--collectives", "all_gather",
               "--backends", "ringcoll", "--out", str(tmp_path), "--plot", ""])
    assert rc == 0
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "ringcoll-bench.json").read_text())["results"]
    assert [(r["size"], r["count"], bool(r["ip"])) for r in rows] == [(12, 3, True),
                                                                      (16, None, False)]
    assert "at p=3 16 B rounds down to 12 B" in rows[1]["skipped"]
    table = [ln.split() for ln in out.splitlines() if ln[:1] == " "]
    assert [t[0] for t in table if t[0].isdigit() and len(t) > 10] == ["12", "16"]
    assert "# 16 B: skipped: at p=3 16 B rounds down to 12 B" in out


def test_a_point_the_algorithm_does_not_serve_is_skipped(tmp_path, capsys, monkeypatch):
    """A ringcoll variant forced to an algorithm that declares world sizes 2 and 4
    and all-reduces from 1 KiB (tests/pyapplies.py): at p = 2 the sizes below 1 KiB
    are skipped and say why (a world size it does not serve goes the same way, as
    the group would refuse it: tests/test_python_algorithms.py); gloo runs
    everything."""
    monkeypatch.setenv("RINGCOLL_ALGO_MODULES", "tests.pyapplies")
    rc = main(["-b", "256", "-e", "4K", "-f", "16", "--nproc", "2", "--budget", "0.01",
               "-n", "2", "-R", "2", "-w", "1", "--collectives", "all_reduce",
               "--backends", "ringcoll+algo=pyapplies,gloo", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "ringcoll-bench.json").read_text())["results"]
    mine = {(r["nproc"], r["size"]): r for r in rows if r["backend"] != "gloo"}
    assert set(mine) == {(2, 256), (2, 4096)}
    assert "1 KiB" in mine[(2, 256)]["skipped"] and mine[(2, 256)]["ip"] is None
    assert "skipped" not in mine[(2, 4096)] and mine[(2, 4096)]["ip"]["wrong"] == 0
    assert "# 256 B: skipped: algorithm 'pyapplies' does not apply to all_reduce at p=2" in out
    assert all(r["ip"] for r in rows if r["backend"] == "gloo")


def test_share_gpu_env(monkeypatch):
    """The one-GPU mode's environment: a host id per rank, NCCL on sockets, and the
    512 KiB point-to-point chunk unless the caller chose one."""
    from ringcoll.gpu import share_gpu_env

    monkeypatch.delenv("NCCL_P2P_NET_CHUNKSIZE", raising=False)
    a, b = share_gpu_env(0), share_gpu_env(1)
    assert a["NCCL_HOSTID"] != b["NCCL_HOSTID"]
    assert a["NCCL_NET"] == "Socket" and a["NCCL_P2P_DISABLE"] == "1"
    assert a["NCCL_P2P_NET_CHUNKSIZE"] == "524288"
    monkeypatch.setenv("NCCL_P2P_NET_CHUNKSIZE", "131072")
    assert "NCCL_P2P_NET_CHUNKSIZE" not in share_gpu_env(0)  # the caller's value stays


# Every bad argument is one line on stderr, argparse's style: the option, what it
# takes, what it got; exit status 2 (a usage error), before any process starts.
@pytest.mark.parametrize("argv, fragments", [
    (["--nproc", "0"], ["argument --nproc", "world sizes >= 1", "'0'"]),
    (["--nproc", "2,x"], ["argument --nproc", "'2,x'"]),
    (["--nproc", ""], ["argument --nproc", "''"]),
    (["-f", "1"], ["argument -f/--stepfactor", "> 1", "'1'"]),
    (["-f", "nan"], ["argument -f/--stepfactor", "'nan'"]),
    (["-b", "0"], ["argument -b/--minbytes", ">= 1", "'0'"]),
    (["-b", "1x"], ["argument -b/--minbytes", "K, M or G", "'1x'"]),
    (["-e", "4", "-b", "64"], ["argument -e/--maxbytes", "4 is below -b/--minbytes 64"]),
    (["-R", "0"], ["argument -R/--runs", ">= 1", "'0'"]),
    (["-n", "two"], ["argument -n/--iters", "'two'"]),
    (["-w", "0"], ["argument -w/--warmup", ">= 1"]),
    (["--max-calls", "2"], ["argument --max-calls", "2 is below -n/--iters 5"]),
    (["--budget", "-1"], ["argument --budget", "seconds >= 0", "'-1'"]),
    (["-c", "2"], ["argument -c/--check", "2"]),
    (["-d", "int8"], ["argument -d/--dtype", "'int8'"]),
    (["-o", "xor"], ["argument -o/--op", "'xor'"]),
    (["--collectives", "all_reduce,bogus"], ["argument --collectives", "reduce_scatter",
                                             "'all_reduce,bogus'"]),
    (["--backends", "ringcoll,bogus"], ["argument --backends", "gloo", "'ringcoll,bogus'"]),
    (["--backends", "ringcoll+nope=1"], ["argument --backends", "'nope=1'", "chunk_bytes"]),
    (["--algo", "bogus"], ["argument --algo", "unknown algorithm 'bogus'", "rhd"]),
    (["--transport", "pigeon"], ["argument --transport", "'pigeon'"]),
    (["--bogus"], ["unrecognized arguments: --bogus"]),
])
def test_bad_argument_is_one_usage_line(argv, fragments, capsys):
    with pytest.raises(SystemExit) as exit_:
        bench.parse_args(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("python -m ringcoll.bench: error: "), err
    for frag in fragments:
        assert frag in err, (frag, err)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this torch sees a GPU")
def test_what_this_torch_lacks_is_one_usage_line(capsys):
    cases = [(["--device", "cuda"], "argument --device: cuda, but torch")]
    if not dist.is_nccl_available():
        cases.append((["--backends", "ringcoll,nccl"],
                      f"argument --backends: nccl needs NCCL, which torch {torch.__version__}"))
    else:
        cases.append((["--backends", "nccl"], "argument --backends: nccl runs on CUDA tensors"))
    for argv, fragment in cases:
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and fragment in err, err


def test_good_arguments_parse():
    a = bench.parse_args(["-b", "1K", "-e", "64M", "-f", "2", "--nproc", "2,4", "--algo", "rhd",
                          "--collectives", "all_gather", "--backends", "ringcoll+fingerprint=0,gloo"])
    assert (a.minbytes, a.maxbytes, a.stepfactor) == (1024, 64 << 20, 2.0)
    assert a.nproc == [2, 4] and a.collectives == ["all_gather"]
    assert a.backends == ["ringcoll+fingerprint=0", "gloo"] and a.device == "cpu"
    d = bench.parse_args([])
    assert (d.minbytes, d.maxbytes, d.stepfactor, d.nproc) == (8, 16 << 20, 4.0, [2, 4])
    assert (d.json, d.csv, d.plot) == ("bench-out/ringcoll-bench.json",
                                       "bench-out/ringcoll-bench.csv",
                                       "bench-out/ringcoll-bench.png")
    w = bench.parse_args(["--out", "bench-out/walk", "--csv", ""])  # a folder of its own
    assert (w.json, w.csv, w.plot) == ("bench-out/walk/ringcoll-bench.json", "",
                                       "bench-out/walk/ringcoll-bench.png")
    assert d.collectives == list(records.DEFAULT) and d.backends == ["ringcoll", "gloo"]
    assert bench.parse_args(["--collectives", "all"]).collectives == list(records.RECORDS)
    assert bench.parse_args(["--collectives", "alltoall,gather"]).collectives == \
        ["all_to_all", "gather"]


def test_help_gives_every_option_its_default():
    ap = bench.parser()
    for action in ap._actions:
        if action.dest == "help":
            continue
        assert action.help and "default" in action.help, action.option_strings
    text = ap.format_help()
    for path in ("bench-out/ringcoll-bench.json", "bench-out/ringcoll-bench.csv",
                 "bench-out/ringcoll-bench.png"):
        assert path in text.replace("-\n", "-").replace("\n", " ").replace(" " * 30, ""), path


def test_tables_say_why_a_placement_is_empty():
    text = report.tables(_rows())
    assert "# out-of-place: - (torch's all_reduce has no out-of-place form)" in text
    assert "all_gather has no" not in text  # it has both


def test_an_error_in_the_ranks_is_one_line(tmp_path, monkeypatch, capsys):
    """An unknown algorithm in the environment (the parent checks only --algo) fails
    in every rank's group creation: one line, the tracebacks in a file."""
    monkeypatch.setenv("RINGCOLL_ALGO", "bogus")
    t0 = time.monotonic()
    rc = main(["-e", "8", "--nproc", "2", "--json", str(tmp_path / "b.json")])
    err = capsys.readouterr().err
    assert rc == 1 and time.monotonic() - t0 < 60
    line = [x for x in err.splitlines() if x.startswith("python -m ringcoll.bench: error:")]
    assert len(line) == 1 and "Traceback" not in err, err
    assert "every rank of 2: RuntimeError: ringcoll: RINGCOLL_ALGO: unknown algorithm 'bogus'" \
        in line[0]
    log = (tmp_path / "ringcoll-bench-errors.log").read_text()
    assert str(tmp_path / "ringcoll-bench-errors.log") in line[0]
    assert log.count("Traceback") == 2 and "create_backend" in log


def rank_one_dies(args, meta):
    import os

    if dist.get_rank() == 1:
        os._exit(3)
    dist.barrier(group=meta)  # waits for a peer that is gone
    return [], 0.0


def test_a_rank_that_dies_stops_the_world_and_is_named(monkeypatch):
    monkeypatch.setattr(bench, "ERROR_GRACE_S", 2.0)
    args = bench.parse_args(["--nproc", "2", "--backends", "gloo"])
    t0 = time.monotonic()
    with pytest.raises(bench.RankError) as err:
        bench._spawn_world(2, args, ["gloo"], {}, world=rank_one_dies)
    assert time.monotonic() - t0 < 60
    summary = err.value.summary()
    assert "rank 1 of 2: exited with code 3" in summary and "\n" not in summary, summary
    assert err.value.stopped in ([0], [])  # rank 0 was left waiting, or failed too


def test_graph_mode_end_to_end(tmp_path, capsys):
    """-G 3 on the stream emulation: beside each eager row a graph row whose calls
    were captured once and replayed (exact, its calls counted per captured call),
    compared with the baseline in the same mode only; gloo cannot capture on the
    CPU and its graph rows say so."""
    rc = main(["-b", "8", "-e", "4K", "-f", "512", "--nproc", "2", "--budget", "0.01",
               "-n", "2", "-R", "2", "-w", "1", "--transport", "stream", "-G", "3",
               "--collectives", "all_reduce,all_gather", "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert ("# ringcoll (transport stream: the CPU emulation of the CUDA path) all_reduce, "
            "2 processes, cpu; graph mode: 3 calls captured, timed per replay / 3") in out
    assert ("# gloo all_reduce, 2 processes, cpu; graph mode: 3 calls captured, timed per "
            "replay / 3: none, gloo has no capture on the CPU (no CUDA graph)") in out
    assert "# graph mode: no ratio, no baseline has a graph figure (gloo has no capture" in out
    rows = json.loads((tmp_path / "ringcoll-bench.json").read_text())["results"]
    graphs = [r for r in rows if r.get("graph") == 3 and r["backend"] == "ringcoll"]
    assert {(r["collective"], r["size"]) for r in graphs} == {
        ("all_reduce", 8), ("all_reduce", 4096), ("all_gather", 8), ("all_gather", 4096)}
    ms = [r[k] for r in graphs for k in ("oop", "ip") if r[k]]
    assert len(ms) == 2 + 2 * 2 and all(m["wrong"] == 0 for m in ms), ms
    assert all(m["calls"] % 3 == 0 and len(m["runs_us"]) == 2 for m in ms), ms
    assert all(r.get("skipped") for r in rows if r.get("graph") and r["backend"] == "gloo")
    comp = report.comparison(rows)
    assert {c["mode"] for c in comp} == {"eager"}, comp  # gloo has no graph figure
    assert len(comp) == 4, comp


def test_graph_mode_needs_the_stream_emulation_on_cpu(tmp_path, capsys):
    rc = main(["-b", "8", "-e", "8", "--nproc", "2", "--budget", "0.01", "-n", "2", "-R", "1",
               "-w", "1", "--transport", "shm", "-G", "2", "--collectives", "all_reduce",
               "--out", str(tmp_path)])
    assert rc == 0
    assert "ringcoll captures CPU collectives on its stream emulation only" in \
        capsys.readouterr().out
