"""What an algorithm declares beyond what the extension's registry holds, and how a
declaration is put in words.

The registry (csrc/schedules/registry.h: Applies) holds world sizes, bytes, count
multiples and roots, and refuses a call before anything is sent. One declaration
cannot live there: all-to-all with equal splits only (ringcoll.schedules.Applies'
equal_splits), because only a rank knows its own counts. ringcoll.schedules records
it here when an algorithm is registered and enforces it when it prepares a call;
ringcoll.check reads it here to prove such an algorithm at equal splits (the
checker and the vocabulary above it import neither each other nor anything but
this room below both).
"""

from __future__ import annotations

# algorithm name -> the collectives (torch's names) it declares equal splits only for
_EQUAL_SPLITS: dict[str, frozenset] = {}


def set_equal_splits(algo: str, collectives) -> None:
    """algo's declaration, as its latest registration gives it (a name defined again
    replaces the earlier one's)."""
    _EQUAL_SPLITS[algo] = frozenset(collectives)


def equal_splits(algo: str, collective: str) -> bool:
    """Whether algo declares that collective (torch's name) serves equal splits only."""
    return collective in _EQUAL_SPLITS.get(algo, ())


def sizes_text(sizes, most: int = 6) -> str:
    """Sorted distinct ints (world sizes) in a few words, whatever their number: runs
    of consecutive ones as first-last ('2-4096'), and beyond `most` runs the first
    ones, '...', the last and the count ('4, 6, 8-10, 12, ..., 4094-4096 (3,531
    sizes)'). A refusal or a skip prints this, not the set (which ran to 370 KB for
    2-65536, per rank)."""
    runs = []
    for p in sizes:
        if runs and p == runs[-1][1] + 1:
            runs[-1][1] = p
        else:
            runs.append([p, p])
    shown = [f"{a}" if a == b else f"{a}-{b}" for a, b in runs]
    if len(shown) <= most:
        return ", ".join(shown)
    return ", ".join(shown[:most - 2] + ["...", shown[-1]]) + f" ({len(sizes):,} sizes)"
