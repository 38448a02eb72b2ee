"""The admission gate: how a region bounds staleness before the work is done.

With B samples per optimizer step, staleness bound O and group size G, a region holding
version `held` may start one more group only while

    (held + O + 1) * B - (submitted - dropped) - in_flight * G >= G

so every admitted sample is due for training within O versions of the weights that start
it (Fireworks' gate). With O = 0 it degenerates into the synchronous loop: a whole batch at
version v, then nothing until v + 1 is published. The trainer's check at training time
stays the hard bound; this gate only keeps regions from doing work that would be dropped.

Not covered: several regions sharing one budget (each gates on its own submissions).
"""

from __future__ import annotations


def may_admit(
    held: int,
    submitted: int,
    dropped: int,
    in_flight: int,
    *,
    batch: int,
    max_staleness: int,
    group_size: int,
    max_groups: int,
) -> bool:
    """Whether one more group of `group_size` samples may start.

    `held`: the policy version the region's engine serves; `submitted`: samples this region
    has handed to the trainer; `dropped`: samples the trainer dropped as too stale;
    `in_flight`: groups running now; `batch`: samples per optimizer step; `max_groups`: the
    region's concurrency cap."""
    if in_flight >= max_groups:
        return False
    counted = submitted - dropped
    budget = (held + max_staleness + 1) * batch - counted - in_flight * group_size
    return budget >= group_size
