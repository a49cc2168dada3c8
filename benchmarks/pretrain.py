#!/usr/bin/env python
"""Pretrain the prior-fitted NPT (issue 51), resuming from the last checkpoint, and export its
weights into the package.

    .venv/bin/python benchmarks/pretrain.py --seconds 3600            # an hour more, then export
    .venv/bin/python benchmarks/pretrain.py --steps 20000             # up to step 20,000 in all
    python benchmarks/pretrain.py --device cuda --seconds 420         # a GPU session's share
    .venv/bin/python benchmarks/pretrain.py --export-only             # weights and card from the checkpoint
    .venv/bin/python benchmarks/pretrain.py --export-only --cooldown 2000  # export cooled-down weights

The training state lives in ``--checkpoint-dir`` (default ``.pretrain/``, not in git): weights,
optimiser, the prior's random state, the loss history, held-out prior scores and the seconds spent
on each kind of device; every run continues it, on the CPU or a GPU. At the end of each run the
weights are exported to ``src/semiparam/weights/npt_prior.safetensors`` with the model card
``npt_prior.json`` beside them, and ``benchmarks/results/pretrain/pretrain.md`` is rendered from it.
With ``--cooldown N`` the exported weights are the checkpoint's trained N steps more at a learning
rate decaying to zero, a branch written nowhere: the checkpoint goes on at its constant rate.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import harness as h
import torch

REPORT = h.RESULTS / "pretrain"


def write_report(card: dict, baseline: dict, rate: dict) -> None:
    REPORT.mkdir(parents=True, exist_ok=True)
    (REPORT / "pretrain.json").write_text(json.dumps({**card, "prior_rate": rate}, indent=1) + "\n")
    hours = {k: v / 3600 for k, v in card["seconds_by_device"].items()}
    consumed = card["tasks_seen"] / max(1.0, sum(card["seconds_by_device"].values()))
    lines = [
        "# The prior-fitted NPT: pretraining so far",
        "",
        f"Generated from `src/semiparam/weights/npt_prior.json` (exported at commit "
        f"`{card['exported_at_commit']}` by `{card['exported_by']}`; machine: {card['machine']}).",
        "",
        f"- parameters: {card['parameters']:,}; feature slots: {card['n_features']}; classes: up to "
        f"{card['max_classes']}",
        f"- steps: {card['steps']:,}, the last {card.get('cooldown_steps', 0):,} a cool-down (the learning "
        f"rate decaying linearly to zero, branched off the constant-rate run); prior tasks seen: "
        f"{card['tasks_seen']:,}",
        "- compute: " + ", ".join(f"{h:.2f} h on {d}" for d, h in sorted(hours.items())),
        "- model: NPT (`NPTConfig.prior()`): "
        + ", ".join(
            f"{k}={card['model_config'][k]}" for k in ("d_embedding", "n_blocks", "n_heads", "ff_multiplier")
        ),
        "- prior (`semiparam.data.prior.TablePrior`, written from the published descriptions of the "
        "prior-fitted networks' priors): random causal networks and sums of random trees; "
        + ", ".join(f"{k}={v}" for k, v in card["prior_config"].items()),
        f"- the prior's speed, measured at export in one process on {rate['threads']} thread(s): "
        f"{rate['tasks_per_second']:.0f} tasks/s ({rate['rows_per_second']:,.0f} rows/s), drawn and encoded "
        f"as the training stream draws them, against {consumed:.0f} tasks/s consumed by pretraining "
        "on average",
        "- training: " + ", ".join(f"{k}={v}" for k, v in card["pretrain_config"].items()),
        "- licence: the weights are the project's own (MIT), trained here on synthetic tables only",
        "- evaluation on real tables: `benchmarks/results/pretrained/pretrained_eval.md`",
        "",
        "Held-out prior tasks (their own seed), by step: mean query loss (cross entropy for "
        "classification, squared error of the standardised target for regression) and "
        "classification accuracy.",
        "",
        "| step | loss | classification | accuracy | regression |",
        "| --- | --- | --- | --- | --- |",
        f"| no features (the training rows' labels alone) | {baseline['loss']:.4f} | "
        f"{baseline['classification']:.4f} | {baseline['accuracy']:.3f} | {baseline['regression']:.4f} |",
    ]
    cooled, cool = card["steps"] - card.get("cooldown_steps", 0), " (cool-down)"
    for e in card["held_out"]:
        lines.append(
            f"| {e['step']}{cool if e['step'] > cooled else ''} | {e['loss']:.4f} | "
            f"{e.get('classification', float('nan')):.4f} | "
            f"{e.get('accuracy', float('nan')):.3f} | {e.get('regression', float('nan')):.4f} |"
        )
    (REPORT / "pretrain.md").write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> None:
    from semiparam import pretraining

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--steps", type=int, default=1_000_000, help="train up to this step of the whole pretraining"
    )
    p.add_argument("--seconds", type=float, default=None, help="stop this run after so many seconds")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, default=2, help="PyTorch threads on a CPU")
    p.add_argument("--checkpoint-dir", type=Path, default=h.ROOT / ".pretrain")
    p.add_argument("--export-only", action="store_true")
    p.add_argument(
        "--cooldown",
        type=int,
        default=0,
        help="export the weights after so many steps more at a "
        "learning rate decaying to zero, branched off the checkpoint (which stays as it was)",
    )
    a = p.parse_args(argv)
    command = h.command_line(None if argv is None else [__file__, *argv])
    torch.set_num_threads(a.threads)
    if not a.export_only:
        _, run = pretraining.continue_pretraining(
            a.checkpoint_dir, steps=a.steps, seconds=a.seconds, device=a.device
        )
        last = run.evaluations[-1] if run.evaluations else {}
        print(f"pretrained to step {run.steps}; held-out {json.dumps(last)}", flush=True)
    if a.cooldown:
        module, run = pretraining.continue_pretraining(
            a.checkpoint_dir, device=a.device, cooldown_steps=a.cooldown
        )
        module, steps = module.cpu(), run.steps
        ledger = {"seconds_by_device": run.seconds_by_device, "evaluations": run.evaluations}
    else:
        module, steps, ledger = pretraining.checkpointed_model(a.checkpoint_dir)
    m = h.machine()
    machine = m["cpu"] + (f", {m['gpu']}" if m.get("gpu") else "")
    card = pretraining.export_weights(
        module, steps, ledger, command, h.code()["commit"], machine=machine, cooldown_steps=a.cooldown
    )
    rate = {**pretraining.prior_rate(10.0), "threads": torch.get_num_threads()}
    write_report(card, pretraining.held_out_baseline(), rate)


if __name__ == "__main__":
    main()
