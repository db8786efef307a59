"""What an error is to the soak: a clear one (in a round with an event, a survivor's
error must name the call and its cause), a Work polled past its timeout (stuck), and
the end of a thread's program after an unplanned error."""

from __future__ import annotations

import re

# A clear error: the call (ringcoll::<op> #<seq> (rank r of p)) and a cause that names
# a peer, an abort or a shutdown; or c10d's own refusal of a group destroyed or aborted.
CLEAR_CALL = re.compile(r"ringcoll::\w+ #\d+ \(rank \d+ of \d+\)")
CLEAR_STOP = re.compile(r"abort\(\)|process group was (aborted|shut down)|destroy_process_group")
CLEAR_GROUP = re.compile(r"(process group|group) (was |has been |is )?"
                         r"(aborted|shut down|destroyed)|Invalid process group"
                         r"|is not initialized in the world group map|is not registered",
                         re.I)


def classify(e: BaseException) -> str:
    """"clear": the message names the call (op, sequence number, this rank) and a cause
    (a peer other than this rank, abort(), a shutdown), or is c10d's refusal of a
    group that was destroyed; else "unclear" ("transfers aborted", waiting for oneself)."""
    text = str(e)
    if CLEAR_GROUP.search(text):
        return "clear"
    call = CLEAR_CALL.search(text)
    if not call:
        return "unclear"
    me = re.search(r"rank (\d+) of", call.group(0)).group(1)
    rest = text[call.end():]
    peers = {m for m in re.findall(r"rank (\d+)", rest)}
    if peers - {me} or CLEAR_STOP.search(rest):
        return "clear"
    return "unclear"


class PollTimeout(Exception):
    """A Work polled (or a chain waited for) past the group's timeout and then some:
    stuck."""


class Stop(Exception):
    """Raised inside a step to end the thread's program (after an unplanned error)."""
