"""The judge: torch's gloo backend. A judged round's program runs on gloo and on
ringcoll; every rank's observations (observe.py, keyed by the call's place in the
program) are compared key by key and field by field. A field that differs is a
divergence unless one of RULES explains it, and every rule must be listed, with its
reason, in docs/SUPPORTED.md ("Where ringcoll differs from gloo"): check_listed()
refuses to judge with a rule the document does not list.

Each rule is narrow on purpose: it names the calls it covers and what ringcoll must
show instead (a future done with the outputs, a clear refusal), so that a rule never
hides a different divergence on the same call."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from tests.soak.calls import INVALID_KINDS

_DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__)))), "docs")
DOC = os.path.join(_DOCS, "SUPPORTED.md")  # the intended differences
BUGS_DOC = os.path.join(_DOCS, "TESTS.md")  # the open bugs
MISSING = "(absent)"
SAMPLES = 12  # divergences kept per run, with both sides
# Calls whose Works have no future on gloo ("Work::getFuture not implemented")
NO_GLOO_FUTURE = {"reduce_scatter_tensor", "reduce_scatter", "coalesced_reduce_scatter",
                  "p2p_batch", "p2p_pairs"}
# Calls whose future holds the outputs as one flat list on ringcoll (its futures are
# List[Tensor], as NCCL's) where gloo's holds them otherwise
FLAT_FUTURE = {"all_gather_into_tensor", "coalesced_all_gather", "all_gather_coalesced"}
FUTURE_FIELDS = ("future", "via", "then", "then_after_wait", "returned")
REDUCE_SCATTERS = {"reduce_scatter_tensor", "reduce_scatter", "coalesced_reduce_scatter"}


@dataclass
class Rule:
    id: str
    what: str  # one line, for the report

    def explains(self, key, path, gv, xv, g, x, parent) -> bool:
        raise NotImplementedError


def _is_clean(x) -> bool:
    """A ringcoll call that raised nothing, completed, succeeded and is exact (or was
    dropped unwaited, as the program says)."""
    if x.get("dropped"):
        return "issue" not in x
    if any(f in x for f in ("issue", "complete")) or x.get("check") in ("differs", None):
        return False
    return all(v == (True, True) for st in x.get("state", []) for v in st.values())


def _flat_outputs(v) -> bool:
    """A future's value summary that is one flat list of the call's outputs."""
    return isinstance(v, list) and all(isinstance(t, str) and re.search(r"@(out\d+|empty)$", t)
                                       for t in v)


def _values_in(obj):
    """Every future value summary inside a field (future, then, then_after_wait, ...)."""
    if isinstance(obj, dict):
        if "value" in obj:
            yield obj["value"]
        for k, v in obj.items():
            if k != "value":
                yield from _values_in(v)
    elif isinstance(obj, (list, tuple)):
        if obj and all(isinstance(t, str) and "@" in t for t in obj):
            yield list(obj)
        else:
            for v in obj:
                yield from _values_in(v)


class MoreDtypesOps(Rule):
    # gloo refuses the call when it is issued (gloo_refuses); the gloo run leaves it
    # out, and ringcoll's run must be clean: exact, completed, no error.
    def explains(self, key, path, gv, xv, g, x, parent):
        return "skipped" in g and _is_clean(x)


class GlooBoolSum(Rule):
    def explains(self, key, path, gv, xv, g, x, parent):
        return path == ("check",) and gv == "bool-bytes" and xv == "exact"


class FutureWhereGlooHasNone(Rule):
    def explains(self, key, path, gv, xv, g, x, parent):
        if x.get("kind") not in NO_GLOO_FUTURE or path[0] not in FUTURE_FIELDS:
            return False
        if not any(f.get("get_future") == "raised RuntimeError" for f in g.get("future", [])):
            return False
        # ringcoll's futures: done, each value a flat list of the outputs (or empty)
        futs = x.get("future", [])
        return bool(futs) and all(f.get("done") is True and _flat_outputs(f.get("value"))
                                  for f in futs)


class FlatFutureValue(Rule):
    def explains(self, key, path, gv, xv, g, x, parent):
        if x.get("kind") not in FLAT_FUTURE or path[0] not in FUTURE_FIELDS:
            return False
        return all(_flat_outputs(v) for v in _values_in(x.get(path[0])))


class OneWorkPerBatch(Rule):
    def explains(self, key, path, gv, xv, g, x, parent):
        if x.get("kind") != "p2p_batch" or path[0] not in ("works", "state") + FUTURE_FIELDS:
            return False
        return x.get("works") == 1 and _is_clean(x) and g.get("works") == 2


class GlooReduceScatterIncomplete(Rule):
    def explains(self, key, path, gv, xv, g, x, parent):
        # (the leaf is the value in is_completed()'s (returned, value) pair)
        return (x.get("kind") in REDUCE_SCATTERS and len(path) == 4 and path[0] == "state"
                and path[2:] == ("completed", 1) and gv is False and xv is True)


class ComplexRealView(Rule):
    def explains(self, key, path, gv, xv, g, x, parent):
        if path[0] not in FUTURE_FIELDS or not (isinstance(gv, str) and isinstance(xv, str)):
            return False
        m = re.fullmatch(r"complex(64|128)\[(.*)\]@(\w+)", gv)
        if not m:
            return False
        real = "float32" if m.group(1) == "64" else "float64"
        shape = f"{m.group(2)}, 2" if m.group(2) else "2"
        return xv == f"{real}[{shape}]@{m.group(3)}"


class RefusedAtIssue(Rule):
    # A call whose arguments are wrong (INVALID_KINDS): ringcoll raises when it is
    # issued; gloo's all_to_all_single checks its split sizes in the Work, raising
    # from wait().
    def explains(self, key, path, gv, xv, g, x, parent):
        return (x.get("kind") in INVALID_KINDS and x.get("issue") == "raised RuntimeError"
                and "complete" not in x and g.get("issue") == "returned"
                and g.get("complete") == "raised RuntimeError")


class ErrorSubclass(Rule):
    def explains(self, key, path, gv, xv, g, x, parent):
        return (isinstance(gv, str) and isinstance(xv, str) and "RuntimeError" in gv
                and xv == gv.replace("RuntimeError", "DistBackendError"))


class EndedGroupCall(Rule):
    # The call after a group was destroyed or aborted: gloo runs it, ringcoll refuses it.
    def explains(self, key, path, gv, xv, g, x, parent):
        if not key.endswith(".after"):
            return False
        refused = x.get("issue") in ("ValueError", "DistBackendError") or \
            x.get("complete") == "DistBackendError"
        return refused and "issue" not in g and "complete" not in g


class AbortInflight(Rule):
    # A call in flight when its group was aborted: gloo's abort stops nothing, ringcoll's
    # fails the calls it stops (as NCCL's), which ones depending on timing (so two
    # transports may differ too): either outcome, never a wrong value.
    def explains(self, key, path, gv, xv, g, x, parent):
        if not (parent and parent.get("call", "").endswith("abort_inflight")):
            return False
        if not re.search(r"\.c\d+$", key):
            return False
        failed = x.get("complete") is not None or g.get("complete") is not None
        return failed and "differs" not in (x.get("check"), g.get("check"))


RULES = [
    MoreDtypesOps("more-dtypes-ops", "gloo refuses the call (dtype, op); ringcoll runs it "
                  "exactly"),
    GlooBoolSum("gloo-bool-sum", "gloo's bool SUM leaves the sum of the bytes; ringcoll "
                "0 and 1"),
    FutureWhereGlooHasNone("future-where-gloo-has-none", "gloo's reduce-scatter and "
                           "point-to-point Works have no future; ringcoll's hold the "
                           "outputs"),
    FlatFutureValue("flat-future-value", "the future of an all-gather into one tensor or "
                    "of a coalesced all-gather holds the outputs as one flat list"),
    OneWorkPerBatch("one-work-per-batch", "batch_isend_irecv returns one Work (coalesced), "
                    "gloo's one per operation"),
    GlooReduceScatterIncomplete("gloo-reduce-scatter-incomplete", "gloo's reduce-scatter "
                                "Works say is_completed() False after wait()"),
    ComplexRealView("complex-real-view", "the future of a call on complex tensors holds "
                    "their real views, as NCCL's"),
    RefusedAtIssue("refused-at-issue", "a call with wrong arguments raises when issued; "
                   "gloo's all_to_all_single raises from wait()"),
    ErrorSubclass("error-subclass", "DistBackendError (a RuntimeError) where gloo raises "
                  "RuntimeError"),
    EndedGroupCall("ended-group-call", "a call on a group destroyed or aborted: gloo runs "
                   "it, ringcoll refuses it"),
    AbortInflight("abort-inflight", "a call in flight at its group's abort: gloo completes "
                  "it, ringcoll may fail it"),
]


# Open bugs: ringcoll divergences that are not intended, each awaiting its fix (the
# rule goes with the fix). Counted apart ("open"), failing a run only under --strict;
# each is listed with its reproduction in docs/TESTS.md ("Open bugs the soak knows").
OPEN: list = []  # none known (the stream batch future's bug was fixed)


def listed_ids(doc) -> set:
    """The rule ids a document lists (table rows that start with `id`)."""
    with open(doc) as f:
        return set(re.findall(r"^\| `([a-z0-9-]+)` \|", f.read(), re.M))


def check_listed(doc=DOC, bugs=BUGS_DOC):
    missing = [r.id for r in RULES if r.id not in listed_ids(doc)]
    if missing:
        raise SystemExit(f"soak: the judge's rules {missing} are not listed in {doc} "
                         "(\"Where ringcoll differs from gloo\"): list each with its reason")
    missing = [r.id for r in OPEN if r.id not in listed_ids(bugs)]
    if missing:
        raise SystemExit(f"soak: the open bugs {missing} are not listed in {bugs} "
                         "(\"Open bugs the soak knows\"): list each with its reproduction")


def leaf_diffs(g, x, path=()):
    """(path, gloo's, ringcoll's) for every leaf where two observations differ."""
    if isinstance(g, dict) and isinstance(x, dict):
        for k in sorted(set(g) | set(x)):
            yield from leaf_diffs(g.get(k, MISSING), x.get(k, MISSING), path + (k,))
    elif (isinstance(g, (list, tuple)) and isinstance(x, (list, tuple))
          and len(g) == len(x)):
        for i, (a, b) in enumerate(zip(g, x)):
            yield from leaf_diffs(a, b, path + (i,))
    elif g != x:
        yield path, g, x


def _parent(obs, key):
    """The observation of the step a call belongs to (t0.s5 for t0.s5.c2)."""
    return obs.get(key.rsplit(".", 1)[0]) if key.count(".") >= 2 else None


def compare(ref_run: dict, run: dict, rules, against: str) -> dict:
    """Compares a ringcoll run of a round with a reference run of the same program,
    rank by rank, key by key, field by field: each difference is explained by one of
    `rules` (counted under "listed", or "open" for an open bug's rule) or is a
    divergence (counted, and the first SAMPLES kept with both sides)."""
    out = {"against": against, "divergences": 0, "samples": [], "listed": {}, "open": {}}

    def diverged(rank, key, path, gv, xv, call):
        out["divergences"] += 1
        if len(out["samples"]) < SAMPLES:
            out["samples"].append({"rank": rank, "key": key, "call": call, "against": against,
                                   "field": ".".join(map(str, path)),
                                   "ref": repr(gv)[:300], "ringcoll": repr(xv)[:300]})
    for rank in sorted(set(ref_run["ranks"]) | set(run["ranks"])):
        gobs = ref_run["ranks"].get(rank, {}).get("obs")
        xobs = run["ranks"].get(rank, {}).get("obs")
        if gobs is None or xobs is None:
            continue  # (a rank that did not report: the run's hang or crash says why)
        for key in sorted(set(gobs) | set(xobs)):
            g, x = gobs.get(key, MISSING), xobs.get(key, MISSING)
            if g == x:
                continue
            if not (isinstance(g, dict) and isinstance(x, dict)):
                diverged(rank, key, (), g, x, None)
                continue
            for path, gv, xv in leaf_diffs(g, x):
                rule = next((r for r in rules
                             if r.explains(key, path, gv, xv, g, x, _parent(xobs, key))),
                            None)
                if rule is None:
                    diverged(rank, key, path, gv, xv, x.get("call") or g.get("call"))
                else:
                    kind = "open" if rule in OPEN else "listed"
                    out[kind][rule.id] = out[kind].get(rule.id, 0) + 1
    return out


def judge(gloo_run: dict, run: dict) -> dict:
    """A ringcoll run against gloo's run of the same program."""
    return compare(gloo_run, run, RULES + OPEN, "gloo")


def agree(first: dict, run: dict) -> dict:
    """A ringcoll run against ringcoll's run of the same program on another transport
    (where gloo has no say, a Work's future on gloo's reduce-scatter and
    point-to-point, the transports must still agree): alike, but for what an abort
    with calls in flight stops (timing) and open bugs."""
    return compare(first, run, [r for r in RULES if isinstance(r, AbortInflight)] + OPEN,
                   f"ringcoll/{first['transport']}")
