"""The structs that cross stage seams: a seeded job's per-request seeds."""

from fleetrl.types import SamplingParams


def test_a_seed_is_drawn_for_each_part_of_seeded_work_and_repeats():
    params = SamplingParams(temperature=0.7, max_tokens=9, seed=3)
    first = params.reseeded("micro-val-0001", 0)
    assert first == params.reseeded("micro-val-0001", 0)
    assert (first.temperature, first.max_tokens) == (0.7, 9)
    seeds = {
        params.reseeded(task, sample).seed
        for task in ("micro-val-0001", "micro-val-0002")
        for sample in range(3)
    }
    seeds |= {first.reseeded(turn).seed for turn in range(3)}
    assert len(seeds) == 9 and params.seed not in seeds
    assert SamplingParams(seed=4).reseeded("micro-val-0001", 0).seed != first.seed
    for seed in seeds:
        SamplingParams(seed=seed).validate()
    unseeded = SamplingParams(temperature=0.7)
    assert unseeded.reseeded("micro-val-0001", 0) is unseeded
