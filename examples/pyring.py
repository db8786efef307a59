"""The ring all-reduce, reduce-scatter and all-gather of csrc/schedules/ring.cc,
written in Python as the algorithm "pyring" (docs/ALGORITHMS.md walks through it)."""
from ringcoll.schedules import (Schedule, block, recv_copy, recv_reduce, reduced, register,
                                send)


def ring(prm, shift, reduce, gather):
    """Share-reduce then share-only around the ring order: at step s each rank sends
    a chunk to the next position and receives one from the previous position."""
    p, me = prm.size, prm.order.index(prm.rank)
    nxt, prev = prm.order[(me + 1) % p], prm.order[(me - 1) % p]

    def chunk(pos):  # the chunk of ring position pos
        return block(prm.n, p, prm.order[pos % p])

    steps = []
    if reduce:
        for s in range(p - 1):
            steps.append([send(nxt, chunk(me + shift - 1 - s)),
                          recv_reduce(prev, chunk(me + shift - 2 - s))])
        # The last receive completes this rank's chunk (p = 1: its own input does).
        steps = steps or [[]]
        steps[-1].append(reduced(chunk(me + shift)))
    if gather:
        for s in range(p - 1):
            steps.append([send(nxt, chunk(me + shift - s)),
                          recv_copy(prev, chunk(me + shift - 1 - s))])
    return steps


@register("pyring", "all_reduce")
def all_reduce(prm):
    return Schedule(ring(prm, 1, reduce=True, gather=True), result=(0, prm.n))


@register("pyring", "reduce_scatter")
def reduce_scatter(prm):
    return Schedule(ring(prm, 0, reduce=True, gather=False),
                    result=block(prm.n, prm.size, prm.rank))


@register("pyring", "all_gather")
def all_gather(prm):
    return Schedule(ring(prm, 0, reduce=False, gather=True), result=(0, prm.n))
