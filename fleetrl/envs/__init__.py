"""Production-like coding environments: sandboxes, tasks, the agent harness and the verifier."""
