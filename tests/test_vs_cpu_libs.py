"""The CPU comparison (benchmarks/vs_cpu_libs.py) without the external libraries: its
summary, ratios and tables on crafted rows, the reason a missing or failed library
shows in every place its figure would be, and its install step's report. The
libraries themselves run in the comparison (its smoke command is in its docstring)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location(
    "vs_cpu_libs", os.path.join(ROOT, "benchmarks", "vs_cpu_libs.py"))
v = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v)

COLUMNS = ["rc.op", "gloo", "rc.op@1", "deepspeed", "mpich", "intel-mpi"]
NOT_INSTALLED = "not installed (--no-install; would pip install mpi4py==4.1.2 mpich==5.0.2)"


def _rows():
    """Two repetitions at p = 2, float32, 8 B and 64 KiB: rc.op 2 / 4 us, gloo ten
    times slower, DeepSpeed twice as slow at 8 B and faster at 64 KiB, MPICH not
    installed, Intel MPI failed at 64 KiB in repetition 2 (and so has one figure)."""
    rows = []
    for rep in (1, 2):
        for size, ref in ((8, 2.0), (64 << 10, 4.0)):
            base = {"p": 2, "rep": rep, "dtype": "float32", "size": size, "load": 1.0}
            t = {"rc.op": ref * rep, "gloo": 10 * ref * rep, "rc.op@1": 0.5,
                 "deepspeed": (2 * ref if size == 8 else ref / 2) * rep,
                 "intel-mpi": 1.0}
            for col in COLUMNS:
                if col == "mpich":
                    rows.append(dict(base, column=col, skipped=NOT_INSTALLED))
                elif col == "intel-mpi" and size > 8 and rep == 2:
                    rows.append(dict(base, column=col, skipped="failed at 64 KiB float32, "
                                     "repetition 2: rank 1 closed its connection (killed "
                                     "by SIGILL)"))
                else:
                    rows.append(dict(base, column=col, calls=10, median_us=t[col],
                                     min_us=t[col] / 2, wrong=1 if col == "gloo" and rep == 2
                                     else 0))
    return rows


def _cell(summary, size, column):
    return next(s for s in summary if s["size"] == size and s["column"] == column)


def test_summary_medians_and_ratios_per_repetition():
    summary = v.summarize(_rows(), COLUMNS)
    ref = _cell(summary, 8, "rc.op")
    assert (ref["median_us"], ref["lo_us"], ref["hi_us"], ref["reps"]) == (3.0, 2.0, 4.0, 2)
    assert ref["ratio"] == 1.0
    gloo = _cell(summary, 8, "gloo")
    assert gloo["ratio"] == pytest.approx(10.0) and gloo["wrong"] == 1
    # ratios are taken within a repetition: 4/2 and 8/4, not the medians' 6/3 by luck
    ds = _cell(summary, 8, "deepspeed")
    assert (ds["ratio_lo"], ds["ratio_hi"]) == (pytest.approx(2.0), pytest.approx(2.0))
    assert _cell(summary, 64 << 10, "deepspeed")["ratio"] == pytest.approx(0.5)
    # intel-mpi at 64 KiB: repetition 1 ran (1 us against rc.op's 4), repetition 2 failed
    impi = _cell(summary, 64 << 10, "intel-mpi")
    assert impi["reps"] == 1 and impi["ratio"] == pytest.approx(0.25)
    assert "killed by SIGILL" in impi["note"]
    assert _cell(summary, 8, "mpich")["skipped"] == NOT_INSTALLED


def test_a_library_that_is_not_installed_is_a_column_with_its_reason():
    summary = v.summarize(_rows(), COLUMNS)
    text = v.table(summary, COLUMNS)
    lines = text.splitlines()
    head = [ln for ln in lines if ln.split()[:1] == ["size"]]
    assert all("mpich" in ln for ln in head)  # in the times and in the ratios
    rows_8b = [ln for ln in lines if ln.strip().startswith("8 B")]
    assert len(rows_8b) == 2 and all("-[1]" in ln for ln in rows_8b)
    assert f"#   [1] {NOT_INSTALLED}" in lines
    assert "above 1, rc.op is faster" in text and "'!': a wrong result" in text
    assert "!" in next(ln for ln in lines if ln.strip().startswith("8 B"))  # gloo's wrong


def test_best_other_leaves_out_ringcoll_and_gloo_and_says_why_when_empty():
    rows = _rows()
    summary = v.summarize(rows, COLUMNS)
    notes = {}
    text = v.best_table(summary, notes)
    by_size = {ln.split()[2] + ln.split()[3]: ln.split() for ln in text.splitlines()[2:]}
    # 1 us against rc.op's 2 and 4: the median of the ratios of each repetition
    assert by_size["8B"][5:8] == ["intel-mpi", "1.00", "0.38"]
    assert by_size["64KiB"][5:8] == ["intel-mpi", "1.00", "0.25"]  # one repetition ran
    assert by_size["8B"][-1] == "0.500"  # the op's entry alone (rc.op@1)
    # only MPICH (not installed) and gloo left: no library to compare, and why
    only = [r for r in rows if r["column"] in ("rc.op", "gloo", "mpich")]
    text = v.best_table(v.summarize(only, ["rc.op", "gloo", "mpich"]), notes)
    assert "no other library has a figure: mpich -[" in text
    assert NOT_INSTALLED in notes


def test_runs_summary_gives_ranges_over_runs():
    runs = []
    for k, scale in enumerate((1.0, 1.5, 1.2)):
        rows = [dict(r, median_us=r["median_us"] * scale) if r["column"] == "deepspeed"
                and "median_us" in r else r for r in _rows()]
        if k == 2:  # Intel MPI did not start in the third run
            rows = [{key: r[key] for key in ("p", "rep", "dtype", "size", "column")}
                    | {"skipped": "failed to start"} if r["column"] == "intel-mpi" else r
                    for r in rows]
        runs.append({"meta": {"date": f"run {k}", "load_start": [1.0], "load_end": [2.0]},
                     "summary": v.summarize(rows, COLUMNS)})
    text = v.runs_summary(runs)
    line = text.splitlines()
    i = next(j for j, ln in enumerate(line) if ln.strip().startswith("8 B"))
    assert "6.00-9.00" in line[i]  # deepspeed's medians 6, 9, 7.2 us
    assert "2.00-3.00x" in line[i + 1]  # its ratios to rc.op, min-max over runs
    # mpich: never installed; intel-mpi: a figure in 2 of the 3 runs
    assert line[i].split()[-2:] == ["-[1]", "(2/3)1.00-1.00"]
    assert f"#   [1] {NOT_INSTALLED}" in line


def test_why_empty_names_the_cause():
    w = v.World("mpich", 2, None, None, {}, "mpiexec")
    w.columns, w.reasons = ["mpich"], {"bfloat16": "no bfloat16 in this MPI"}
    assert v.why_empty(w, "mpich", "float32", 8) == ""
    assert v.why_empty(w, "mpich", "bfloat16", 8) == "no bfloat16 in this MPI"
    assert v.why_empty(w, "mpich", "float32", 6) == "6 B is not a whole number of float32 " \
                                                     "elements"
    w.dead = NOT_INSTALLED
    assert v.why_empty(w, "mpich", "float32", 8) == NOT_INSTALLED


def test_no_install_and_a_failed_install_are_reasons(tmp_path, monkeypatch):
    monkeypatch.setenv("RINGCOLL_BENCH_CACHE", str(tmp_path))
    venv, why = v.ensure_venv("mpich", install=False)
    assert venv is None and why.startswith("not installed (--no-install; would pip install ")
    assert "mpich==" in why and "mpi4py==" in why

    # pip fails (no network, a missing version): one line naming the step and the log
    def call(cmd, stdout=None, stderr=None, env=None):
        if cmd[1:3] == ["-m", "venv"]:
            os.makedirs(os.path.join(cmd[3], "bin"), exist_ok=True)
            return 0
        stdout.write("ERROR: No matching distribution found for mpich==5.0.2\n")
        return 1

    monkeypatch.setattr(subprocess, "call", call)
    venv, why = v.ensure_venv("mpich", install=True)
    assert venv is None
    assert why.startswith("not installed: pip install mpi4py==4.1.2 mpich==5.0.2 numpy failed")
    assert "No matching distribution found for mpich==5.0.2" in why
    assert str(tmp_path / "venv-mpich-") in why  # the log's path


def test_every_library_installs_pinned_and_is_a_column():
    for lib, spec in v.LIBRARIES.items():
        assert lib in v.WORLDS and any(world == lib for world in v.COLUMNS.values()), lib
        for step in spec["packages"]:
            for req in step:
                assert "==" in req or req in ("numpy", "ninja"), (lib, req)
    json.dumps(v.LIBRARIES)  # what the venv's marker records


def _runs(scales, column="deepspeed"):
    """Runs of _rows() whose `column` times are scaled by `scales` (one run each)."""
    runs = []
    for k, scale in enumerate(scales):
        rows = [dict(r, median_us=r["median_us"] * scale) if r["column"] == column
                and "median_us" in r else r for r in _rows()]
        runs.append({"meta": {"date": f"run {k}", "load_start": [1.0], "load_end": [2.0]},
                     "summary": v.summarize(rows, COLUMNS)})
    return runs


def test_headline_names_the_fastest_other_library_and_its_range():
    # 8 B: DeepSpeed 2x rc.op's time (its 1.5x run: 3x) against Intel MPI's 1 us: Intel
    # MPI is the fastest; rc.op's medians 3 us, Intel MPI's ratios 1/2 and 1/4 per
    # repetition, median 0.375; gloo 10x
    text = v.headline(_runs((1.0, 1.5)))
    row = next(ln for ln in text.splitlines() if ln.startswith("| 8 B |"))
    assert row == "| 8 B | 3.00-3.00 us | Intel MPI 0.38-0.38 | 10-10 |", row


def test_check_counts_figures_inside_within_the_tolerance_and_outside():
    refs = _runs((1.0, 1.2), "rc.op")  # rc.op 3-3.6 us at 8 B; the ratios 1/1.2-1x theirs
    # a rerun with rc.op 1.3x as slow: its time 8 % past the edge, each ratio 8 %;
    # 2x: 67 % and 40 %
    text, misses = v.check_run(refs, _runs((1.3,), "rc.op")[0], 0.15)
    assert misses == 0 and "(8% outside)" in text, text
    assert text.splitlines()[0].endswith("0 inside, 6 within 15% of an edge, 0 outside that")
    text, misses = v.check_run(refs, _runs((2.0,), "rc.op")[0], 0.15)
    assert misses == 6 and "miss (67% outside)" in text and "miss (40% outside)" in text, text
