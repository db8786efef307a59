"""Test-only algorithms for the vocabulary's newer words, loaded through
RINGCOLL_ALGO_MODULES in the processes that need them:

  pyswap  recursive doubling for powers of two whose rounds alternate between the
          buffer and the scratch: round k sends the buffer that holds the value and
          receives into the other one, then folds the held value into it (the lower
          rank incoming-first, the upper one buffer-first: lower OP upper on both).
          The scratch starts empty, the last round's buffer is marked reduced
          (AVG divides there, in the scratch after an odd number of rounds) and, when
          that is the scratch, the result lies in it.
"""

from ringcoll.schedules import (POWERS_OF_TWO, Applies, Schedule, recv_copy, recv_reduce,
                                reduced, register, send)


def swap(prm):
    p, r, n = prm.size, prm.rank, prm.n
    held, other = (0, n), (n, 2 * n)
    steps = []
    d = 1
    while d < p:
        q = r ^ d
        steps.append([send(q, held), recv_copy(q, other)])
        # other = held OP other on the lower rank (its value first), other OP held on
        # the upper one (the received lower value first)
        steps.append([send(r, held), recv_reduce(r, other, incoming_first=r < q)])
        held, other = other, held
        d *= 2
    steps = steps or [[]]
    steps[-1].append(reduced(held))
    return Schedule(steps, result=held, scratch=n if p > 1 else 0, empty_scratch=True)


register("pyswap", "all_reduce", applies=Applies(world_sizes=POWERS_OF_TWO))(swap)
