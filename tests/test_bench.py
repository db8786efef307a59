"""The benchmark: formulas, sweep, writers, plot, the #wrong check, and one tiny
end-to-end run with 2 processes."""

from __future__ import annotations

import csv
import json

import pytest
import torch
import torch.distributed as dist

from ringcoll.bench import main, records, report
from tests import mp


def test_bus_factors_match_nccl_tests():
    assert records.bus_factor("all_reduce", 4) == pytest.approx(1.5)
    assert records.bus_factor("all_reduce", 2) == pytest.approx(1.0)
    assert records.bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert records.bus_factor("reduce_scatter", 3) == pytest.approx(2 / 3)
    assert records.bus_factor("broadcast", 8) == 1.0
    algbw, busbw = records.bandwidths("all_reduce", 1_000_000_000, 2.0, 4)
    assert algbw == pytest.approx(0.5) and busbw == pytest.approx(0.75)
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


def _rows():
    m = lambda t, w=0: {"time_us": t, "algbw": 1.0 / t, "busbw": 2.0 / t, "wrong": w}  # noqa: E731
    rows = []
    for backend, t in (("ringcoll", 1.0), ("gloo", 2.0)):
        for size in (8, 1024):
            rows.append({"backend": backend, "collective": "all_reduce", "nproc": 2,
                         "device": "cpu", "dtype": "float32", "op": "sum", "size": size,
                         "count": size // 4, "root": -1, "oop": None, "ip": m(t * size)})
            rows.append({"backend": backend, "collective": "all_gather", "nproc": 2,
                         "device": "cpu", "dtype": "float32", "op": "none", "size": size,
                         "count": size // 4, "root": -1, "oop": m(t * size, 3),
                         "ip": m(t * size)})
    return rows


def test_tables_and_comparison():
    rows = _rows()
    text = report.tables(rows)
    assert "# ringcoll all_reduce, 2 processes, cpu" in text
    assert "#wrong" in text and "out-of-place" in text and "in-place" in text
    comp = report.comparison(rows)
    assert len(comp) == 4
    assert all(c["ratio"] == pytest.approx(2.0) for c in comp)  # ringcoll twice as fast
    assert "busbw ratio" in report.comparison_table(rows)


def test_json_csv_plot(tmp_path):
    rows = _rows()
    report.write_json(tmp_path / "r.json", rows, {"command": "x"})
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["meta"]["command"] == "x" and len(data["results"]) == len(rows)
    assert len(data["comparison"]) == 4
    report.write_csv(tmp_path / "r.csv", rows)
    with open(tmp_path / "r.csv") as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and table[1]["oop_wrong"] == "3"
    assert table[0]["oop_time_us"] == ""  # all_reduce has no out-of-place
    report.write_plot(tmp_path / "r.png", rows)
    assert (tmp_path / "r.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def corrupted_output_is_counted(rank, p):
    out = {}
    for name, rec in records.RECORDS.items():
        case = rec.build(rank, p, 6 * p, torch.float32, "sum", "cpu", True, None)
        case.run().wait()
        clean = records.count_wrong(case.output, case.expected)
        case.output.view(-1)[0] += 1  # one wrong element
        out[name] = (clean, records.count_wrong(case.output, case.expected))
    return out


def test_check_catches_a_wrong_result():
    for per_rank in mp.run_world(2, corrupted_output_is_counted):
        for name, (clean, corrupted) in per_rank.items():
            assert clean == 0, name
            assert corrupted == 1, name


def test_end_to_end_tiny(tmp_path, capsys):
    rc = main(["-b", "8", "-e", "1K", "-f", "128", "--nproc", "2", "-n", "2", "-R", "1",
               "-w", "1", "--json", str(tmp_path / "b.json"), "--csv", str(tmp_path / "b.csv"),
               "--plot", str(tmp_path / "b.png")])
    assert rc == 0
    out = capsys.readouterr().out
    for coll in ("all_reduce", "reduce_scatter", "all_gather"):
        assert f"# ringcoll {coll}, 2 processes, cpu" in out
        assert f"# gloo {coll}, 2 processes, cpu" in out
    data = json.loads((tmp_path / "b.json").read_text())
    assert {r["size"] for r in data["results"]} >= {8, 1024}
    assert all((r[k] or {"wrong": 0})["wrong"] == 0 for r in data["results"] for k in ("oop", "ip"))
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"
