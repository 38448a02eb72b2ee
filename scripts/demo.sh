#!/usr/bin/env bash
# `make demo`: make the bundled tiny model, serve it, talk to it through the OpenAI client,
# then run the engine benchmark. The model is random (the RL demo needs the shipped base model),
# so its words are noise; what the demo shows is the serving path and the engine's speed.
set -euo pipefail
cd "$(dirname "$0")/.."
FLEETRL=.venv/bin/fleetrl
MODEL=.cache/demo-model
PORT=${PORT:-$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')}

[ -f "$MODEL/config.json" ] || $FLEETRL model init "$MODEL"

$FLEETRL serve "$MODEL" --port "$PORT" --admin-token demo-token --threads 1 &
SERVER=$!
trap 'kill $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT

.venv/bin/python - "$PORT" <<'PY'
import sys, time, httpx, openai
port = sys.argv[1]
for _ in range(120):
    try:
        if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
            break
    except httpx.HTTPError:
        time.sleep(0.5)
else:
    sys.exit("server did not come up")
client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
reply = client.chat.completions.create(
    model="demo-model",
    messages=[{"role": "user", "content": "Fix the failing test in utils.py"}],
    max_tokens=24, logprobs=True, seed=0,
)
choice = reply.choices[0]
print(f"chat completion ({reply.usage.completion_tokens} tokens, finish={choice.finish_reason}):")
print("  ", repr(choice.message.content))
print("  first logprobs:", [round(t.logprob, 3) for t in choice.logprobs.content[:6]])
tokens = httpx.post(f"http://127.0.0.1:{port}/generate",
                    json={"prompt_ids": [1, 2, 3], "sampling": {"max_tokens": 8, "seed": 1}}).json()
print("token API /generate:", {k: tokens[k] for k in ("token_ids", "versions", "finish_reason")})
PY

kill $SERVER; wait $SERVER 2>/dev/null || true
trap - EXIT
echo
$FLEETRL bench engine
