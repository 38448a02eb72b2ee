"""mini-swe-agent as a rollout harness: its agent loop, parser and prompts, unmodified.

    task ─▶ sandbox over its repository (the caller's)
         ─▶ minisweagent DefaultAgent(model, SandboxEnvironment, our config)   (a thread)
              model: its own LitellmTextbasedModel ─▶ recording endpoint, user = session id
              each action: one bash command in the sandbox; `echo COMPLETE_TASK_AND_SUBMIT_
              FINAL_OUTPUT` submits (mini-swe-agent's own check)
         ─▶ sandbox_changes ─▶ verify(task, changes, commands as `run` calls) ─▶ reward, flags
         ─▶ GET /v1/sessions/{id}: the segments; POST its reward ─▶ Trajectory

The package is used as published (`pip install fleetrl[mswe]`): `DefaultAgent`, the litellm
model class a user would pick for a local model (`LitellmTextbasedModel`, the text format of
`mini_textbased.yaml`: one ```mswea_bash_command block per reply), its parser, its
observation rendering and its submit check. What is ours: the configuration
(`fleetrl/configs/mswe.yaml`, prompts short enough for a small model's window, budgets from
the harness section) and the environment, mini-swe-agent's `LocalEnvironment` with the
command run in a fleetrl sandbox instead of on the host. The tokens come from the recording
endpoint (`fleetrl serve --record`, `fleetrl.inference.recording`): the session's segments
are exactly what the engine sampled, whatever litellm did to the text in between.

`scripted_mswe_actions` is the scripted expert in this format (the gold patch's edits as
bash), for tests, SFT demonstrations and guided groups; `ScriptedModel` replays it through
the same model class (litellm's `mock_response`, no network), `ScriptedEngine` as an
engine's samples behind a recording endpoint (the tokens an RL episode would record).

Not covered: mini-swe-agent's tool-calling model classes (v2's default format), its
interactive agent, and litellm's retries (one try: a failed request fails the episode).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
import shlex
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

# Before the package loads: no start-up banner, no fetch of litellm's cost map (offline
# machines wait for its retries), and no retry of a failed request (4-60 s waits each).
os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")

import httpx
import litellm
import uvicorn
import yaml
from minisweagent.agents.default import DefaultAgent
from minisweagent.environments.local import LocalEnvironment
from minisweagent.models.litellm_textbased_model import LitellmTextbasedModel
from minisweagent.utils.serialize import recursive_merge

from fleetrl.config import HarnessSection
from fleetrl.envs.sandbox import Sandbox
from fleetrl.envs.tasks import guide
from fleetrl.envs.tasks.gold_guide import script
from fleetrl.envs.tasks.workspace import ensure_repo
from fleetrl.envs.verifier import sandbox_changes, verify
from fleetrl.inference.backends import RolloutEngine
from fleetrl.inference.engine import Engine, check_prompt
from fleetrl.inference.recording import SessionRecorder
from fleetrl.inference.server import create_app
from fleetrl.model.chat import GENERATION_PROMPT
from fleetrl.model.qwen3 import Qwen3
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.types import (
    Completion,
    InvalidRequest,
    SamplingParams,
    Segment,
    Task,
    Trajectory,
)

litellm.suppress_debug_info = True  # its "Provider List" banner on every uncosted call

HARNESS = "mini-swe-agent"  # the value of `rollout.harness`
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"  # mini-swe-agent's submit command
FENCE = "mswea_bash_command"  # the code fence its text-based action regex looks for
# The engine's refusal of a prompt that fills the window (fleetrl.inference.engine).
_CONTEXT_FULL = "leaves no room in the context"
# How mini-swe-agent's exit statuses read as a Trajectory's finish_reason.
_FINISH = {
    "Submitted": "finish",
    "LimitsExceeded": "max_turns",
    "TimeExceeded": "wall_time",
    "RepeatedFormatError": "format_errors",
}


@cache
def base_config() -> dict[str, Any]:
    """fleetrl's mini-swe-agent configuration (`fleetrl/configs/mswe.yaml`), as loaded."""
    text = resources.files("fleetrl").joinpath("configs/mswe.yaml").read_text()
    return yaml.safe_load(text)


def mswe_config(harness: HarnessSection) -> dict[str, Any]:
    """The configuration with the harness section's budgets: replies per episode
    (`max_turns`), wall time, a command's timeout (`run_timeout_s`)."""
    budgets = {
        "agent": {"step_limit": harness.max_turns, "wall_time_limit_seconds": int(harness.wall_s)},
        "environment": {"timeout": int(harness.run_timeout_s)},
    }
    return recursive_merge(base_config(), budgets)


class SandboxEnvironment(LocalEnvironment):
    """mini-swe-agent's local environment with each command run in a fleetrl sandbox.

    The output is the command's stdout and stderr interleaved (as its `LocalEnvironment`
    gives them), a timeout or a command no program can be given (a NUL byte) is reported as
    its own reports them, and the submit check is its own
    (`_check_finished` raises `Submitted`). `commands` keeps every command run, for the
    verifier's tool-log checks."""

    def __init__(self, sandbox: Sandbox, **kwargs: Any) -> None:
        """`kwargs`: mini-swe-agent's `LocalEnvironmentConfig` (env, timeout, cwd)."""
        super().__init__(**kwargs)
        self.sandbox = sandbox
        self.commands: list[str] = []

    def execute(self, action: dict, cwd: str = "", *, timeout: int | None = None) -> dict[str, Any]:
        """Run `action["command"]` with bash in the sandbox's workspace (or `cwd` in it)."""
        command = action.get("command", "")
        self.commands.append(command)
        where = cwd or self.config.cwd
        prologue = f"cd {shlex.quote(where)} || exit 1\n" if where else ""
        limit = timeout or self.config.timeout
        argv = ["/bin/bash", "-c", f"{prologue}exec 2>&1\n{command}"]
        try:
            result = self.sandbox.exec(argv, timeout=limit, env=self.config.env)
        except ValueError as err:  # a command no program can be given (a NUL byte in it)
            output = {
                "output": "",
                "returncode": -1,
                "exception_info": f"An error occurred while executing the command: {err}",
                "extra": {"exception_type": "ValueError", "exception": str(err)},
            }
            self._check_finished(output)
            return output
        text = result.stdout + result.stderr
        if result.timed_out:
            output = {
                "output": text,
                "returncode": -1,
                "exception_info": "An error occurred while executing the command: "
                f"Command '{command}' timed out after {limit} seconds",
                "extra": {"exception_type": "TimeoutExpired", "exception": "timed out"},
            }
        else:
            output = {"output": text, "returncode": result.exit_code, "exception_info": ""}
        self._check_finished(output)
        return output

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """Its own variables without the host's environment (commands never see it)."""
        return recursive_merge(self.config.model_dump(), platform.uname()._asdict(), kwargs)


def endpoint_model(
    base_url: str, session_id: str, sampling: SamplingParams, harness: HarnessSection
) -> LitellmTextbasedModel:
    """mini-swe-agent's litellm text model on a recording endpoint, as a user configures
    it: an OpenAI-compatible `api_base`, the session id as the request's `user` field."""
    kwargs: dict[str, Any] = {
        "api_base": f"{base_url.rstrip('/')}/v1",
        "api_key": "unused",
        # litellm forwards `user` only for models of OpenAI's own catalog and drops it
        # silently for any other name; the request body's extra fields always go through.
        "extra_body": {"user": session_id},
        "temperature": sampling.temperature,
        "max_tokens": harness.max_reply_tokens,
        "timeout": harness.wall_s,
    }
    if sampling.seed is not None:
        kwargs["seed"] = sampling.seed
    config = base_config()["model"]
    return LitellmTextbasedModel(model_name="openai/fleetrl", model_kwargs=kwargs, **config)


class ScriptedModel(LitellmTextbasedModel):
    """mini-swe-agent's litellm text model answering with fixed replies (litellm's
    `mock_response`): its parser, cost and message handling run as for a served model."""

    def __init__(self, replies: list[str]) -> None:
        """`replies`: one text per turn, e.g. `scripted_mswe_actions(task)`."""
        super().__init__(model_name="openai/scripted", **base_config()["model"])
        self.replies = list(replies)

    def query(self, messages: list[dict[str, str]], **kwargs: Any) -> dict:
        """The next reply, parsed as a served one is; RuntimeError past the last."""
        if not self.replies:
            raise RuntimeError("the scripted model has no reply left")
        return super().query(messages, mock_response=self.replies.pop(0), **kwargs)


def action_reply(thought: str, command: str) -> str:
    """One reply in mini-swe-agent's text format: a THOUGHT, then one bash block."""
    return f"THOUGHT: {thought}\n\n```{FENCE}\n{command}\n```"


def _heredoc(body: str) -> str:
    """A here-document delimiter that no line of `body` is."""
    mark = "EOF"
    while mark in body.splitlines():
        mark += "_"
    return mark


def scripted_mswe_actions(task: Task) -> Iterator[str]:
    """The scripted expert's replies on `task` in mini-swe-agent's format, from its gold
    patch (`fleetrl.envs.tasks.gold_guide.script`): read each changed file with line
    numbers, make each hunk's edit with python (an exact, unique replacement), check that
    the changed modules import, submit. ValueError where the gold-patch guide cannot."""
    ensure_repo(task)  # the script reads the base files
    for step, call in script(task, guide.FIX):
        args = call.arguments
        if step == "read":
            path = shlex.quote(args["path"])
            if "start" in args:
                command = f"nl -ba {path} | sed -n '{args['start']},{args['end']}p'"
            else:
                command = f"nl -ba {path}"
            yield action_reply(f"Let me read {args['path']}.", command)
        elif step == "edit":
            code = (
                "from pathlib import Path\n"
                f"p = Path({args['path']!r})\n"
                "s = p.read_text()\n"
                f"old, new = {args['old']!r}, {args['new']!r}\n"
                "assert s.count(old) == 1, 'the text to replace is not there once'\n"
                "p.write_text(s.replace(old, new))\n"
            )
            mark = _heredoc(code)
            command = f"python - <<'{mark}'\n{code}{mark}"
            yield action_reply(f"I fix the bug in {args['path']}.", command)
        elif step == "write":
            content, path = args["content"], args["path"]
            mark = _heredoc(content)
            folder = os.path.dirname(path)
            mkdir = f"mkdir -p {shlex.quote(folder)} && " if folder else ""
            command = f"{mkdir}cat <<'{mark}' > {shlex.quote(path)}\n{content}{mark}"
            yield action_reply(f"I create {path}.", command)
        elif step == "check":
            yield action_reply("I check that the code still imports.", args["command"])
        elif step == "finish":
            yield action_reply("The fix is done; I submit.", SUBMIT)


class ScriptedEngine(Engine):
    """An Engine whose sampling returns scripted replies: everything around it (the
    recording endpoint, the agent, the sandbox) is real.

    A request's episode is the script whose key (the task's problem statement, which
    mini-swe-agent's instance prompt holds) is in the decoded prompt, the longest if
    several are; its turn is the number of replies the prompt already holds (the count of
    the chat format's generation prompt, minus one). The reply's tokens are its encoding
    plus `<|im_end|>`, cut at the request's `max_tokens` and the window as the real
    engine's would be. Requests are stateless, so episodes may run concurrently."""

    def __init__(
        self, model: Qwen3, tokenizer: Tokenizer, scripts: dict[str, list[str]], max_model_len: int
    ) -> None:
        """`model` gives the configuration only (no token is computed); `scripts`: the
        replies of each episode by its key; `max_model_len` as the real engine's."""
        super().__init__(model, max_batch_size=1, max_model_len=max_model_len, prefix_cache_slots=0)
        self.tokenizer = tokenizer
        self.scripts = scripts
        self._turn_mark = tokenizer.encode(GENERATION_PROMPT)

    def _turn(self, prompt_ids: list[int]) -> int:
        mark, n = self._turn_mark, len(self._turn_mark)
        return sum(prompt_ids[i : i + n] == mark for i in range(len(prompt_ids) - n + 1)) - 1

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams | None = None
    ) -> Completion:
        """The script's next reply for the episode `prompt_ids` belongs to."""
        params = params or SamplingParams()
        check_prompt(prompt_ids, self.max_model_len, self.config.vocab_size)
        text = self.tokenizer.decode(prompt_ids)
        keys = [key for key in self.scripts if key in text]
        if not keys:
            raise InvalidRequest("no script's key is in the prompt")
        replies, turn = self.scripts[max(keys, key=len)], self._turn(prompt_ids)
        if turn >= len(replies):
            raise InvalidRequest(f"the script has {len(replies)} replies, turn {turn} asked")
        ids = [*self.tokenizer.encode(replies[turn]), self.tokenizer.eos_id]
        room = min(params.max_tokens, self.max_model_len - len(prompt_ids))
        finish = "stop" if len(ids) <= room else "length"
        ids = ids[:room]
        versions = [self.version] * len(ids)
        return Completion(list(prompt_ids), ids, [0.0] * len(ids), versions, finish)


@dataclass
class MsweEpisode:
    """What a mini-swe-agent episode leaves besides the sandbox's files."""

    exit_status: str  # mini-swe-agent's: Submitted, LimitsExceeded, ... or "ContextFull"
    messages: list[dict[str, Any]]  # its conversation, as it keeps it (with `extra`)
    commands: list[str]  # every command run in the sandbox, in order
    turns: int  # model calls
    format_errors: int  # replies its parser refused
    duration_s: float
    tool_calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    @property
    def finish_reason(self) -> str:
        """The exit status as a `Trajectory.finish_reason`."""
        if self.exit_status == "ContextFull":
            return "context_full"
        return _FINISH.get(self.exit_status, self.exit_status)


def run_mswe_agent(
    model: Any, sandbox: Sandbox, task: Task, harness: HarnessSection
) -> MsweEpisode:
    """mini-swe-agent's `DefaultAgent` on `task` in `sandbox` until it submits or a limit
    ends it (blocking: call it in a thread from asyncio code). A prompt that no longer fits
    the engine's window ends the episode ("context_full"), so does a request that times out
    ("wall_time": one slow answer must not end an evaluation); any other model error raises."""
    config = mswe_config(harness)
    env = SandboxEnvironment(sandbox, **config["environment"])
    agent = DefaultAgent(model, env, **config["agent"])
    start = time.monotonic()
    try:
        result = agent.run(task=task.problem_statement, max_output_chars=harness.max_output_chars)
        status = result.get("exit_status", "")
    except litellm.Timeout:  # a request over the harness's wall time, on a loaded engine
        status = "TimeExceeded"
    except Exception as err:
        if _CONTEXT_FULL not in str(err) or agent.n_calls < 2:
            raise
        status = "ContextFull"
    errors = sum(m.get("extra", {}).get("interrupt_type") == "FormatError" for m in agent.messages)
    return MsweEpisode(
        exit_status=status,
        messages=agent.messages,
        commands=list(env.commands),
        turns=agent.n_calls,
        format_errors=errors,
        duration_s=time.monotonic() - start,
        tool_calls=[("run", {"command": command}) for command in env.commands],
    )


def session_segments(base_url: str, session_id: str) -> list[Segment]:
    """The recorded segments of a session (GET /v1/sessions/{id})."""
    response = httpx.get(f"{base_url.rstrip('/')}/v1/sessions/{session_id}", timeout=60)
    response.raise_for_status()
    return [Segment(**segment) for segment in response.json()["segments"]]


def post_reward(base_url: str, session_id: str, reward: float, task_id: str) -> dict[str, Any]:
    """End a recorded session with its reward (POST /v1/sessions/{id}/reward); a server
    with `--store` sends its group of `task_id` into the run's trajectory channel."""
    response = httpx.post(
        f"{base_url.rstrip('/')}/v1/sessions/{session_id}/reward",
        json={"reward": reward, "task_id": task_id},
        timeout=60,
    )
    response.raise_for_status()
    return response.json()


def new_session_id(task: Task) -> str:
    """A fresh recording session id for an episode of `task`."""
    return f"{task.instance_id[:200]}-{uuid.uuid4().hex[:16]}"


def episode_trajectory(
    episode: MsweEpisode, segments: list[Segment], task: Task, group_id: str = ""
) -> Trajectory:
    """The Trajectory of an episode whose tokens are `segments` (reward still 0)."""
    return Trajectory(
        task_id=task.instance_id,
        segments=segments,
        reward=0.0,
        finish_reason=episode.finish_reason,
        turns=episode.turns,
        tool_calls=len(episode.commands),
        tool_errors=episode.format_errors,
        duration_s=episode.duration_s,
        group_id=group_id,
    )


def run_mswe_episode(
    task: Task,
    sandbox: Sandbox,
    repo: Path,
    base_url: str,
    sampling: SamplingParams,
    harness: HarnessSection,
    verify_timeout_s: float = 60.0,
    group_id: str = "",
) -> Trajectory:
    """One graded mini-swe-agent episode on `task` through the recording endpoint at
    `base_url` (blocking; `sandbox` is over `repo`, the task's checkout, and stays open).

    The agent works in a fresh session; the verifier grades the sandbox's changes with the
    commands it ran as its tool log (every anti-cheat flag, as for fleetrl's own harness);
    the session's segments become the trajectory and its reward is posted, which ends the
    session (and, on a server with `--store`, sends it into its task's group)."""
    session_id = new_session_id(task)
    model = endpoint_model(base_url, session_id, sampling, harness)
    episode = run_mswe_agent(model, sandbox, task, harness)
    changes = sandbox_changes(sandbox, repo)
    result = verify(task, changes, episode.tool_calls, timeout=verify_timeout_s)
    trajectory = episode_trajectory(episode, session_segments(base_url, session_id), task, group_id)
    trajectory.reward, trajectory.flags = result.reward, result.flags
    post_reward(base_url, session_id, result.reward, task.instance_id)
    return trajectory


class _Embedded(uvicorn.Server):
    """A uvicorn server inside a process that owns its signals (a region): it leaves
    SIGINT and SIGTERM to the process and stops when told (`should_exit`)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class LocalEndpoint:
    """A recording endpoint serving `engine` on 127.0.0.1 from the running event loop (the
    engine's own), for a region whose episodes run inside mini-swe-agent.

    Rewards end sessions and go nowhere else (no sink): the region sends its groups
    itself. Its lifespan is off, so stopping it leaves the engine to its owner."""

    def __init__(self, engine: RolloutEngine, tokenizer: Tokenizer) -> None:
        self.recorder = SessionRecorder(tokenizer, group_size=1)
        app = create_app(engine, tokenizer, "fleetrl", admin_token=None, recorder=self.recorder)
        self.server = _Embedded(uvicorn.Config(app, log_level="warning", lifespan="off"))
        self.url = ""
        self._serving: asyncio.Task[None] | None = None

    async def start(self) -> str:
        """Start serving on a free port; its base URL."""
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self._serving = asyncio.create_task(self.server.serve(sockets=[sock]))
        while not self.server.started:
            if self._serving.done():
                self._serving.result()  # raises why it stopped
                raise RuntimeError("the recording endpoint stopped before it started")
            await asyncio.sleep(0.01)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.url

    async def close(self) -> None:
        """Stop serving (sessions still recording are lost, as the recorder logs)."""
        if self._serving is not None:
            self.server.should_exit = True
            await self._serving
            self._serving = None
        self.recorder.close()
