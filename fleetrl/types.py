"""Plain data structs that cross the seams between fleetrl's stages.

Everything here is a dataclass of builtins (no tensors), so it pickles, serialises to JSON
and travels between processes unchanged. Later stages (tasks, trajectories) add their
structs here too.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, replace


class InvalidRequest(ValueError):
    """A request's own input is wrong (a 4xx), as opposed to a failure while serving it."""


@dataclass
class SamplingParams:
    """How the engine samples one completion.

    Logprob convention: each returned logprob is the log-probability of the sampled token
    under the exact distribution it was drawn from: logits divided by `temperature`, then
    restricted by `top_k` / `top_p` and renormalised. With `top_k=0` and `top_p=1` (the RL
    default) that is `log_softmax(logits / temperature)`, which the trainer recomputes.
    `temperature=0` means greedy decoding; its logprobs are then reported at temperature 1.
    """

    temperature: float = 1.0  # 0 = greedy; otherwise logits are divided by it
    top_p: float = 1.0  # nucleus mass kept, in (0, 1]; 1 = off
    top_k: int = 0  # keep the k most likely tokens; 0 = off
    max_tokens: int = 256  # generated tokens at most (stop tokens included)
    stop_token_ids: list[int] = field(default_factory=list)  # generation ends after any of these
    seed: int | None = None  # per-request RNG seed: same seed, same tokens
    top_logprobs: int = 0  # also return this many most likely alternatives per token

    def validate(self) -> None:
        """Raise InvalidRequest naming the field when a value is out of range."""
        if self.temperature < 0:
            raise InvalidRequest(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InvalidRequest(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidRequest(f"top_k must be >= 0, got {self.top_k}")
        if self.max_tokens < 1:
            raise InvalidRequest(f"max_tokens must be >= 1, got {self.max_tokens}")
        if not 0 <= self.top_logprobs <= 20:
            raise InvalidRequest(f"top_logprobs must be in [0, 20], got {self.top_logprobs}")
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise InvalidRequest(f"seed must be in [0, 2**63), got {self.seed}")

    def reseeded(self, *parts: object) -> SamplingParams:
        """These parameters with a seed of their own, drawn from this seed and `parts` (an
        episode's task and sample, then a reply's turn): seeded work split into many
        requests, each of whose tokens depend on its place in the work only, never on what
        was batched beside it. Unseeded parameters are returned unchanged."""
        if self.seed is None:
            return self
        digest = hashlib.sha256(repr((self.seed, *parts)).encode()).digest()
        return replace(self, seed=int.from_bytes(digest[:8], "big") >> 1)


@dataclass
class Completion:
    """One generated completion with everything RL training needs, per generated token.

    All per-token lists have one entry per generated token, in order.
    """

    prompt_ids: list[int]  # the prompt exactly as given
    token_ids: list[int]  # sampled token ids (a final stop token included)
    logprobs: list[float]  # behaviour logprob of each sampled token (see SamplingParams)
    versions: list[int]  # policy version of the weights that sampled each token
    finish_reason: str  # "stop" (a stop token), "length" (max_tokens or context full)
    # MoE only: experts each token was routed to as input, [token][moe_layer][top_k].
    routed_experts: list[list[list[int]]] | None = None
    # MoE only: the same for every prompt position, [prompt_pos][moe_layer][top_k].
    prompt_routed_experts: list[list[list[int]]] | None = None
    # With SamplingParams.top_logprobs > 0: per token, the most likely {token_id: logprob}.
    top_logprobs: list[dict[int, float]] | None = None


@dataclass
class Task:
    """One coding task in the SWE-bench schema, its repository a local git directory.

    The repository at `repo` holds exactly one commit, `base_commit`: the bug in place and
    every hidden test file removed. The agent starts from that tree and sees only
    `problem_statement`; `patch` and `test_patch` stay with the verifier, which applies
    the agent's diff, then `test_patch`, and rewards 1 iff every FAIL_TO_PASS test and
    every PASS_TO_PASS test passes. `fleetrl.envs.tasks.records` loads and validates these
    records, `fleetrl.envs.tasks.workspace` checks them out.
    """

    instance_id: str  # unique id, e.g. "micro-train-0007" or "calc__operator_swap_1a2b3c4d"
    # Absolute path of the task's git repository. Bundled suites materialise it on first
    # use (fleetrl.envs.tasks.workspace.ensure_repo), so it may not exist until then.
    repo: str
    base_commit: str  # 40-hex sha of the repository's only commit: the agent's starting tree
    problem_statement: str  # the issue text the agent is given
    patch: str  # gold fix: unified diff against base_commit (hidden from the agent)
    test_patch: str  # unified diff that re-adds the hidden test files (hidden from the agent)
    FAIL_TO_PASS: list[str]  # pytest node ids failing at base_commit, passing with `patch`
    PASS_TO_PASS: list[str]  # pytest node ids passing both before and after `patch`
    suite: str = ""  # bundled suite that built it ("micro"); "" for generated or imported tasks
    split: str = ""  # "train", "val", "heldout", ...: bundled suites and `tasks make` folders
    test_files: list[str] = field(default_factory=list)  # repo-relative paths test_patch adds
    language: str = "python"  # language of the repository's code and tests
    kind: str = ""  # bug kind, e.g. "operator_swap" or "feature_deletion"; "" if unknown
    origin: str = ""  # where the bug sits: micro template name, or "path.py::function"
    # What a solution must carry from where it read it to where it uses it (names, values,
    # paths): the `long` suite's, which a benchmark looks for in the agent's summaries.
    facts: list[str] = field(default_factory=list)


@dataclass
class Segment:
    """One context window of an episode: exactly the tokens the model saw and produced.

    All lists run over every position of `token_ids`. An episode without summarisation is
    one segment; each self-summarisation starts a new one (a fresh context).
    """

    token_ids: list[int]  # prompt, sampled replies and tool results, in order
    loss_mask: list[int]  # 1 where the policy sampled the token (trained on), 0 elsewhere
    logprobs: list[float]  # behaviour logprob where loss_mask is 1, 0.0 elsewhere
    versions: list[int]  # policy version that sampled the token; -1 where loss_mask is 0
    # MoE only: experts per position as the engine last routed it, [pos][moe_layer][top_k].
    routed_experts: list[list[list[int]]] | None = None
    # SamplingParams.temperature of the sampled tokens (0: greedy, their logprobs are then
    # at temperature 1); the trainer recomputes logprobs of logits / temperature.
    temperature: float = 1.0
    # True for an expert's episode put into a group that failed whole
    # (`rollout.guide_failed_groups`): no engine sampled it, so it has no behaviour
    # logprob; the trainer takes the proximal policy's in its place (weight 1).
    guided: bool = False


@dataclass
class Trajectory:
    """One agent episode on one task, with its reward: the unit the trainer consumes."""

    task_id: str  # Task.instance_id
    segments: list[Segment]  # the episode's context windows, in order
    reward: float  # from the verifier (0.0 until verified)
    # "finish", "no_tool_call", "max_turns", "max_tokens", "context_full" or "wall_time"
    finish_reason: str
    turns: int  # assistant replies sampled
    tool_calls: int  # tool calls executed (valid or not)
    tool_errors: int  # malformed calls, unknown tools, bad arguments, failed tools
    duration_s: float  # wall time of the episode, verification excluded
    flags: list[str] = field(default_factory=list)  # verifier anti-cheat flags raised
    group_id: str = ""  # samples of one task drawn together share it (group advantages)
    failed_edits: int = 0  # edit_file calls the tool refused (no unique match, bad path, ...)
    # The text of each summary the policy wrote when its context filled, in order: one
    # fewer than the segments of a self-summarising episode (`harness.summarise_at`).
    summaries: list[str] = field(default_factory=list)


@dataclass
class Demo:
    """One expert demonstration, as the harness recorded it: what SFT trains on."""

    task_id: str  # Task.instance_id (a renamed copy's: the original's + "-" + its function)
    plan: str  # the expert's plan, a key of fleetrl.envs.micro.expert.PLANS
    token_ids: list[int]  # prompt, expert replies and tool results of one context window
    loss_mask: list[int]  # 1 on the expert's reply tokens (each ends with <|im_end|>)
