"""Pretrain a fresh model on Python source code found on this machine, before SFT.

The shipped base learns Python only from ~8,000 demonstrations of twenty function
templates, so it knows their lines by heart and little else. Every open-weights model the
field specialises has read a great deal of code first. This script gives the micro model
that step at its own scale: next-token prediction on the standard library and the installed
packages' sources (no hub needed), packed into fixed-length rows. The result is a checkpoint
that `fleetrl sft --init` continues.

    python scripts/pretrain_code.py OUT          # ~30 min on 2 cores with AVX512-BF16
    fleetrl sft STAGE1 --init OUT --steps 700 --batch-size 16 --lr 1.5e-3 --warmup 30

The defaults are the run of docs/log/2026-12-04-s32-pretraining-on-code.md: 2,600 steps
of 16 rows of 512 tokens, one pass over 22 M tokens, cosine from 1.5e-3 to 1.5e-4.
`--max-seconds` stops early (the schedule does not shrink with it).

fleetrl's own sources are never read (they hold the task templates, the unseen ones too),
and neither are tests. The files are shuffled with the seed; the last `--val-files` of them
give the validation loss. The training loop is SFT's (`fleetrl.trainer.sft.train_sft`) with
every token a target.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from lab.pretrain import corpus_roots, pack_rows, source_files

from fleetrl.config import SftSection
from fleetrl.model.checkpoint import init_model
from fleetrl.model.tokenizer import bundled_tokenizer
from fleetrl.trainer.sft import model_config, train_sft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="checkpoint directory to write")
    parser.add_argument("--tokens", type=int, default=22_000_000, help="training tokens to pack")
    parser.add_argument("--length", type=int, default=512, help="tokens per row")
    parser.add_argument("--steps", type=int, default=2600, help="optimizer steps")
    parser.add_argument("--max-seconds", type=float, default=0, help="stop after this, 0: never")
    parser.add_argument("--batch-size", type=int, default=16, help="rows per step")
    parser.add_argument("--lr", type=float, default=1.5e-3, help="peak learning rate, AdamW")
    parser.add_argument("--warmup", type=int, default=100, help="linear warmup steps")
    parser.add_argument("--val-files", type=int, default=200, help="files kept for validation")
    parser.add_argument("--seed", type=int, default=0, help="file order and initial weights")
    parser.add_argument("--fp32", action="store_true", help="float32 matmuls (no bf16 autocast)")
    args = parser.parse_args()
    if args.val_files < 1:
        parser.error("--val-files must be at least 1: the validation loss needs files")

    torch.set_num_threads(2)
    files = source_files(corpus_roots(), args.seed)
    tokenizer = bundled_tokenizer()
    train_files, val_files = files[: -args.val_files], files[-args.val_files :]
    val = pack_rows(val_files, tokenizer.encode, tokenizer.eos_id, args.length, 200 * args.length)
    train = pack_rows(train_files, tokenizer.encode, tokenizer.eos_id, args.length, args.tokens)
    print(f"{len(files)} files; {len(train)} training rows, {len(val)} validation rows", flush=True)
    config = SftSection(
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_steps=args.warmup,
        max_seconds=args.max_seconds,
        val_every=250,
        bf16=not args.fp32,
        seed=args.seed,
    )
    model = init_model(model_config(tokenizer), seed=args.seed)
    about = {"command": " ".join(sys.argv), "rows": len(train), "length": args.length}
    result = train_sft(model, train, tokenizer, args.out, config, about=about, val_demos=val)
    print(f"{result.steps} steps in {result.duration_s:.0f} s, validation {result.val_losses[-1]}")


if __name__ == "__main__":
    main()
