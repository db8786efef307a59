"""Recursive doubling all-reduce for any p, written twice in Python: "recdbl" with
the whole vocabulary (docs/ALGORITHMS.md), and "recdbl_copyback" without the
incoming-first reduce and the empty scratch, as it had to be written before them.
benchmarks/results/recdbl-vs-ring-cpu.txt measures both against the ring.

1. p not a power of two: P is the largest power of two below p; rank P + i sends its
   buffer to rank i, which reduces it in (buffer OP incoming), so ranks 0..P-1 each
   hold the fold of one or two inputs.
2. Rounds d = 1, 2, 4, ..., P/2: rank r and its partner r ^ d send each other their
   whole buffer, received into scratch (which need not start as a copy: it is
   written before it is read), then each reduces it in. Both must compute
   lower OP upper, the fold of the lower rank's ranks first, so that every rank
   ends with the same bits: the lower rank reduces buffer-first (buffer OP
   incoming), the upper rank incoming-first (incoming OP buffer). One receive and
   one reduce per round.
3. Rank i returns the result to rank P + i.

p = 4, rank 1: round 1 exchanges with rank 0 (upper: incoming OP buffer), round 2
with rank 3 (lower: buffer OP incoming). Without the incoming-first reduce the upper
rank can only fold into the scratch (scratch OP buffer) and copy it back: a third
pass over the buffer every round (recdbl_copyback), and its scratch starts as a copy
of the buffer that nothing reads.
"""
from ringcoll.schedules import Schedule, recv_copy, recv_reduce, reduced, register, send


def _recursive_doubling(prm, incoming_first):
    p, r, n = prm.size, prm.rank, prm.n
    whole, scratch = (0, n), (n, 2 * n)
    core = 1 << (p.bit_length() - 1)  # the largest power of two <= p
    rounds = core.bit_length() - 1
    per = 2 if incoming_first else 3  # steps a round takes (the same on every rank)
    steps = []
    if core < p:  # fold the extra ranks in
        if r >= core:
            steps.append([send(r - core, whole)])
        else:
            steps.append([recv_reduce(r + core, whole)] if r + core < p else [])
    if r >= core:  # an extra rank waits out the rounds
        steps += [[] for _ in range(per * rounds)]
    else:
        for k in range(rounds):
            q = r ^ (1 << k)
            steps.append([send(q, whole), recv_copy(q, scratch)])
            if r < q:  # lower: buffer OP incoming
                steps += [[send(r, scratch), recv_reduce(r, whole)]] + [[]] * (per - 2)
            elif incoming_first:  # upper: incoming OP buffer, in place
                steps.append([send(r, scratch), recv_reduce(r, whole, incoming_first=True)])
            else:  # upper, without it: fold into the scratch, then copy it back
                steps += [[send(r, whole), recv_reduce(r, scratch)],
                          [send(r, scratch), recv_copy(r, whole)]]
        steps = [list(st) for st in steps] or [[]]
        steps[-1].append(reduced(whole))
    if core < p:  # return the result
        if r >= core:
            steps.append([recv_copy(r - core, whole)])
        else:
            steps.append([send(r + core, whole)] if r + core < p else [])
    return Schedule(steps, result=whole, scratch=n if p > 1 else 0,
                    empty_scratch=incoming_first)


@register("recdbl", "all_reduce", summary="recursive doubling: log2 p exchanges of the whole "
          "buffer, each one receive and one reduce (incoming-first on the upper rank)")
def all_reduce(prm):
    return _recursive_doubling(prm, incoming_first=True)


@register("recdbl_copyback", "all_reduce", summary="recursive doubling without incoming-first "
          "reduces: the upper rank folds into scratch and copies back")
def all_reduce_copyback(prm):
    return _recursive_doubling(prm, incoming_first=False)
