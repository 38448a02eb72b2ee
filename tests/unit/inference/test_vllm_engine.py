"""The vLLM backend's pure parts, without vLLM: weight version spans to per-token
versions, vLLM's routing table to the Completion's form."""

import pytest

from fleetrl.inference.vllm_engine import split_routes, token_versions


class Span:
    def __init__(self, version: str, start: int, end: int) -> None:
        self.version, self.start, self.end = version, start, end


def test_version_spans_become_one_version_per_token():
    spans = [Span("default", 0, 2), Span("3", 2, 5), Span("4", 5, 6)]
    assert token_versions(spans, 6, 2) == [2, 2, 3, 3, 3, 4]
    assert token_versions(None, 3, 7) == [7, 7, 7]


def test_routes_split_into_prompt_and_generated_positions():
    # 3 prompt positions, 2 generated tokens: vLLM computed 4 inputs, 2 MoE layers, top-2
    table = [[[p, p + 1], [p + 2, p + 3]] for p in range(4)]
    generated, prompt = split_routes(table, 3, 2)
    assert prompt == table[:3]
    assert generated == [table[3], [[-1, -1], [-1, -1]]]
    with pytest.raises(ValueError, match="routes for 2 positions of 4 inputs"):
        split_routes(table[:2], 3, 2)
