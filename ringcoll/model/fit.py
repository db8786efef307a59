"""Fitting a transport's constants to measured calls.

The model is linear in its constants (overhead, alpha, beta, gamma, wake, copy,
step) once each step's critical rank is fixed, but which rank is critical depends
on the constants. So: start from the current constants, take every measured call's
terms (model.terms), solve for overhead, alpha, beta, step (and wake, fitting both
kinds of world at once) by least absolute relative error, each row divided by
the measured time (sizes span five orders of magnitude and the target is a
relative error; the absolute error pulls less towards outliers), and by least
absolute log-ratio (log_ratio: why), keeping the one of smaller median error,
with gamma and copy (staging's memcpy)
held at their separately measured values and every constant kept >= 0 (the best
of the least-squares solutions over the subsets of constants left free whose
solution is all >= 0), and repeat with the new constants until the critical ranks
stop changing (a few rounds).

ports (how many of a step's transfers a rank moves at once) is no linear term:
fit_ports fits the rest for each of PORTS in turn and keeps the count whose
constants predict the measurements best (median |predicted/measured - 1|), so the
port count is measured here as the one the calls' times are best explained by.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics

import numpy as np

from . import Calibration, LinkCost, constants, predict, terms

FREE = (0, 1, 2, 4, 6)  # overhead, alpha, beta, wake, step; gamma (3), copy (5) measured apart
PORTS = (1, 2, 3, 4)  # the port counts fit_ports tries
LOG_ROUNDS = 20  # the most Gauss-Newton rounds of log_ratio


def nnls(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """argmin |a x - b| with x >= 0, for a few columns (every subset tried)."""
    best, best_res = np.zeros(a.shape[1]), float(np.sum(b * b))
    for k in range(1, a.shape[1] + 1):
        for cols in itertools.combinations(range(a.shape[1]), k):
            x, *_ = np.linalg.lstsq(a[:, cols], b, rcond=None)
            if np.any(x < 0):
                continue
            full = np.zeros(a.shape[1])
            full[list(cols)] = x
            res = float(np.sum((a @ full - b) ** 2))
            if res < best_res:
                best, best_res = full, res
    return best


def least_absolute(a: np.ndarray, b: np.ndarray, rounds: int = 8) -> np.ndarray:
    """argmin sum |a x - b| with x >= 0, by iteratively reweighted least squares:
    the target is a median error, and this machine's outliers (a rank preempted for
    a whole run) must not pull every prediction."""
    w = np.ones(len(b))
    for _ in range(rounds):
        c = nnls(a * w[:, None], b * w)
        w = 1 / np.sqrt(np.maximum(np.abs(a @ c - b), 0.02))
    return c


def log_loss(x: np.ndarray, fixed: np.ndarray, y: np.ndarray, c: np.ndarray) -> float:
    """sum |log(predicted / measured)|: inf where a prediction is not positive."""
    pred = fixed + x @ c
    return float(np.sum(np.abs(np.log(pred / y)))) if np.all(pred > 0) else np.inf


def log_ratio(x: np.ndarray, fixed: np.ndarray, y: np.ndarray, starts: list,
              rounds: int = LOG_ROUNDS) -> np.ndarray:
    """argmin sum |log((fixed + x c) / y)| with c >= 0, from the start of least loss
    (Gauss-Newton, each round least_absolute on the log linearised at the current
    prediction, the step halved while the loss grows). Relative error alone is
    bounded below and not above: a prediction of 0 costs 1 a row, one 200x too high
    199, so a few rows timed far too short (the model's broadcast rows once timed
    the issue, not the call) made the all-zero constants its best; the log costs
    both sides alike (log 200 = 5.3 a row), and a prediction of 0 without end."""
    c = min(starts, key=lambda s: log_loss(x, fixed, y, s))
    loss = log_loss(x, fixed, y, c)
    if not np.isfinite(loss):
        return starts[0]
    for _ in range(rounds):
        pred = fixed + x @ c
        # log(fixed + x c') ~ log(pred) + x (c' - c) / pred
        new = least_absolute(x / pred[:, None], np.log(y / pred) + (x @ c) / pred)
        step = 1.0
        while step > 1e-3 and log_loss(x, fixed, y, c + step * (new - c)) > loss:
            step /= 2
        moved = c + step * (new - c)
        now = log_loss(x, fixed, y, moved)
        if now > loss:
            break
        c, done = moved, loss - now <= 1e-9 * loss
        loss = now
        if done:
            break
    return c


def rows_of(rows, transport: str, cal: Calibration, crowded: bool | None = None) -> list:
    """The measurements of `transport` a fit uses (auto's aside): every one, or with
    crowded=False / True those with p <= cores / p > cores."""
    known = cal.transports.get(transport)
    cores = (known.cores if known else 0) or cal.cores  # the transport's own host, if it has one
    return [r for r in rows if r["transport"] == transport and r["algo"] != "auto"
            and (crowded is None or (r["p"] > cores) == crowded)]


def median_error(rows, cal: Calibration) -> float:
    """The median |predicted/measured - 1| of measured calls under `cal` (auto's aside)."""
    errs = [abs(predict(r["algo"], r["collective"], r["p"], r["size"], r["transport"], cal)
                / r["time_s"] - 1) for r in rows if r["algo"] != "auto"]
    return statistics.median(errs) if errs else float("nan")


def fit_ports(rows, transport: str, cal: Calibration, crowded: bool | None = None,
              choices=PORTS) -> tuple[LinkCost, dict]:
    """fit_link with each port count of `choices` held; the fitted constants that
    predict `rows` (those fit_link uses) best, and each count's median error."""
    key = f"{transport}/crowded" if crowded else transport
    base = cal.transports.get(key) or cal.transports.get(transport) or LinkCost(0, 0, 0)
    used = rows_of(rows, transport, cal, crowded)
    errors, best = {}, None
    for ports in choices:
        held = dataclasses.replace(cal, transports={**cal.transports,
                                                    key: dataclasses.replace(base, ports=ports)})
        link = fit_link(used, transport, held, crowded=crowded)
        errors[ports] = median_error(used, dataclasses.replace(
            held, transports={**held.transports, key: link}))
        if best is None or errors[ports] < errors[best.ports]:
            best = link
    return best, errors


def fit_link(rows, transport: str, cal: Calibration, rounds: int = 6,
             crowded: bool | None = None) -> LinkCost:
    """The constants of `transport` that best predict `rows` (measurements of it:
    dicts with algo, collective, p, size, time_s). crowded=False / True: fit only
    the rows with p <= cores / p > cores (the "<transport>/crowded" set)."""
    rows = rows_of(rows, transport, cal, crowded)
    if not rows:
        raise ValueError(f"no measurements of transport {transport} to fit")
    y = np.array([r["time_s"] for r in rows])
    # wake's column equals alpha's when every row has p > cores (each message pays
    # alpha + wake there) and is zero when none has: only a fit over both kinds of
    # world can tell the two apart, so a fit of one kind holds wake at 0 and alpha
    # carries the whole per-message cost (an arbitrary split would read as a finding).
    free = FREE if crowded is None else tuple(i for i in FREE if i != 4)
    for _ in range(rounds):
        x = np.array([terms(r["algo"], r["collective"], r["p"], r["size"], transport, cal)
                      for r in rows])
        const = constants(transport, cal, "float32", rows[0]["p"])  # gamma, copy: measured apart
        fixed = const[3] * x[:, 3] + const[5] * x[:, 5]
        # Least absolute relative error (the measured time divides each row), and
        # least absolute log-ratio from the better start (log_ratio); kept: the one
        # whose median |predicted/measured - 1| is less, the figure fit_ports and
        # the report judge by.
        rel = least_absolute(x[:, free] / y[:, None], (y - fixed) / y)
        log = log_ratio(x[:, free], fixed, y, [rel, np.array([const[i] for i in free])])
        c = min((rel, log), key=lambda v: np.median(np.abs((fixed + x[:, free] @ v) / y - 1)))
        k = dict(zip(free, (float(v) for v in c)))
        key = f"{transport}/crowded" if crowded else transport
        # The transport's own settings (segment, header, batches, gamma, copy) stay.
        base = cal.transports.get(key) or cal.transports.get(transport) or LinkCost(0, 0, 0)
        link = dataclasses.replace(base, overhead=k[0], alpha=k[1], beta=k[2],
                                   wake=k.get(4, 0.0), step=k[6])
        cal = dataclasses.replace(cal, transports={**cal.transports, key: link})
    return link
