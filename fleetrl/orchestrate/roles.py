"""Process entry points: `python -m fleetrl.orchestrate.roles trainer|region RUN_DIR [NAME]`.

Each role reads the resolved config from RUN_DIR/config.toml, so a process can be started
(or restarted) by hand, on this machine or another one that reaches the same store.
"""

from __future__ import annotations

import sys
from pathlib import Path

from fleetrl.config import load_config


def main(argv: list[str]) -> None:
    """Run one role until it is done (trainer) or told to stop (region)."""
    if len(argv) < 2 or argv[0] not in ("trainer", "region"):
        sys.exit("usage: python -m fleetrl.orchestrate.roles trainer|region RUN_DIR [NAME]")
    role, run_dir = argv[0], Path(argv[1])
    config = load_config(run_dir / "config.toml")
    if role == "trainer":
        from fleetrl.trainer.loop import run_trainer

        run_trainer(config, run_dir)
    else:
        from fleetrl.rollout.region import run_region

        run_region(config, run_dir, argv[2] if len(argv) > 2 else "region-0")


if __name__ == "__main__":
    main(sys.argv[1:])
