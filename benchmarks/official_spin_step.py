"""Seconds per training step of the SPIN authors' official code, at the Protein SPIN settings.

    /tmp/offvenv/bin/python benchmarks/official_spin_step.py --official-root /tmp/spin_official \
        --n 8192 --steps 2 --threads 2

What it measures: one optimisation step of the official SPIN model (github.com/RichRast/SPIN) on one
batch of ``--n`` rows, after one warm-up step, with ``torch.set_num_threads(--threads)``. A step is
what their ``Trainer.run_batch`` does in training: the model's forward pass (``dataset_mode='train'``),
their loss (``npt.loss.Loss``: MSE on the masked feature and label cells, normalised per kind and mixed
by the tradeoff, whose cosine annealer starts at ``exp_tradeoff`` = 1), backward (their model clamps
every gradient element to [-1, 1] through hooks it registers itself, ``exp_gradient_clipping`` = 1),
their optimizer (``npt.utils.train_utils.init_optimizer``: Lookahead(k=6) around their LAMB,
lr 1e-3; torch 2's ``step`` wrapper reads two hook tables that their Lookahead never makes, so the
script adds them, empty), ``zero_grad`` and the detach of the batch losses. Not in a step: the
learning-rate scheduler (it only sets the lr; it needs fairseq and transformers) and the BERT-style
masking, which their data loader does once per epoch; the masking is timed once and reported as
``mask_seconds``.

The model is built by their code from their parser's defaults plus the Protein SPIN line of their
``scripts/SPIN_scripts.sh`` (read from the official folder at run time), with ``--exp_batch_size`` set
to ``--n`` so that the model is built for n rows. The data are synthetic and Protein-shaped: 9 numeric
features and the numeric target RMSD in column 0 (as their ``ProteinDataset``), standard normal (their
encoding standardises numeric columns), each column encoded as their ``encode_data`` encodes a numeric
column: (value, mask token), so 10 columns of width 2. All rows are train rows; their
``mask_data_for_dataset_mode`` masks 15% of the target cells (stochastic label masking) and 15% of
the feature cells (BERT augmentation), as the script's mask probabilities say.

Printed: one JSON line with the seconds of each timed step, the fp32 matmul rate probed before each
timed step and after the last (``matmul_rate.py``), the FLOPs of one more step (PyTorch's
``FlopCounterMode``: matrix products, which is all their attention is made of), the peak resident
set size (``ru_maxrss``) and its rise above the peak before the model was built, the parameter
count, the settings, the official commit and the torch version. Their own prints go to stderr.
``step_cost.py --official-spin`` runs it beside the library's SPIN and reports the two together.

Getting the official code (this file imports it; it contains none of it):

    git clone https://github.com/RichRast/SPIN /tmp/spin_official   # or: git archive HEAD | tar -x
    git -C /tmp/spin_official rev-parse HEAD > /tmp/spin_official/OFFICIAL_COMMIT

and a separate environment with torch, numpy and ``sparsemax`` (which their attention module imports):

    python3 -m venv /tmp/offvenv
    /tmp/offvenv/bin/pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
    /tmp/offvenv/bin/pip install numpy sparsemax

Their loss, masking and encoding modules import ``turtle`` (needs tkinter), ``torchmetrics``,
``scipy`` and ``sklearn`` for things a training step does not call (AUROC and R^2 logging, dataset
encoding); where one of those is not installed, a placeholder module that raises when used stands in,
and the JSON line lists them under ``stubbed_imports``.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import importlib.machinery
import json
import platform
import resource
import shlex
import statistics
import sys
import time
import types
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matmul_rate import RATE_PROBE_SECONDS, matmul_rate
from torch.utils.flop_counter import FlopCounterMode

SCRIPT = Path("scripts") / "SPIN_scripts.sh"
COMMIT_FILE = "OFFICIAL_COMMIT"
N_FEATURES = 9  # Protein: F1..F9
TARGET_COL = 0  # Protein: RMSD is column 0 of CASP.csv
D = N_FEATURES + 1

# Imports of the official modules that a training step never calls: module -> names imported from it.
IMPORT_ONLY: dict[str, tuple[str, ...]] = {
    "turtle": ("pd",),  # npt/loss.py, unused (and turtle needs tkinter)
    "torchmetrics.functional": ("auroc",),  # npt/loss.py, AUROC at evaluation
    "scipy.stats": ("pearsonr",),  # npt/loss.py, R^2 for the imputation data set
    "sklearn.preprocessing": ("OneHotEncoder", "StandardScaler", "LabelEncoder"),  # encode_utils
}


class Config(argparse.Namespace):
    """Their parser's namespace with the ``get`` of the wandb config their code is given in training."""

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)


def _unavailable(module: str, name: str) -> Callable[..., Any]:
    def stand_in(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"{module}.{name} is not installed here; the benchmark stubbed it")

    return stand_in


def stub_missing_imports() -> list[str]:
    """Put placeholder modules in ``sys.modules`` for the import-only dependencies that are missing."""
    stubbed = []
    for module_name, names in IMPORT_ONLY.items():
        try:
            importlib.import_module(module_name)
            continue
        except ImportError:
            pass
        parts = module_name.split(".")
        parent: types.ModuleType | None = None
        for depth in range(1, len(parts) + 1):
            name = ".".join(parts[:depth])
            module = sys.modules.get(name)
            if module is None:
                module = types.ModuleType(name)
                module.__path__ = []  # a package, so that submodules resolve
                module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
                sys.modules[name] = module
            if parent is not None:
                setattr(parent, parts[depth - 1], module)
            parent = module
        assert parent is not None
        for name in names:
            setattr(parent, name, _unavailable(module_name, name))
        stubbed.append(module_name)
    return stubbed


def protein_spin_args(root: Path) -> list[str]:
    """The arguments of the Protein SPIN line of their scripts/SPIN_scripts.sh."""
    lines = [
        line.strip()
        for line in (root / SCRIPT).read_text().splitlines()
        if line.strip().startswith("--data_set protein") and "--SPIN True" in line
    ]
    if len(lines) != 1:
        raise SystemExit(f"expected one Protein SPIN line in {root / SCRIPT}, found {len(lines)}")
    return shlex.split(lines[0])


def parse_dict_call(text: str) -> dict[str, float]:
    """``"dict(train=0.15, val=0, test=0)"`` -> dict, without executing it (their run.py uses exec)."""
    call = ast.parse(text, mode="eval").body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "dict"):
        raise ValueError(f"not a dict(...) call: {text!r}")
    return {kw.arg: float(ast.literal_eval(kw.value)) for kw in call.keywords if kw.arg is not None}


def build_config(build_parser: Callable[[], argparse.ArgumentParser], args: list[str], n: int) -> Config:
    c = build_parser().parse_args([*args, "--exp_batch_size", str(n)], namespace=Config())
    for key in ("model_augmentation_bert_mask_prob", "model_label_bert_mask_prob"):
        value = getattr(c, key)
        if not isinstance(value, dict):
            setattr(c, key, parse_dict_call(value))
    c.exp_device = "cpu"
    c.cv_index = 0
    return c


def protein_shaped_data(n: int, seed: int) -> list[torch.Tensor]:
    """D columns of (standardised value, mask token 0), float32, as their encoding of numeric columns."""
    generator = torch.Generator().manual_seed(seed)
    values = torch.randn(n, D, generator=generator)
    return [torch.stack([values[:, j], torch.zeros(n)], dim=1).contiguous() for j in range(D)]


def describe_encoder(model: torch.nn.Module) -> list[str]:
    """The attention layers their builder stacked, in order (reshape modules left out)."""
    blocks = []
    for module in model.enc:
        if type(module).__name__ != "MHSA":
            continue
        if module.input_shape == "nested":
            blocks.append(
                "ABA: XABA cross-attn (N,F,E)<-(N,D,E)" + (" + ABLA self-attn" if module.c.ABLA else "")
            )
        else:
            blocks.append("ABD: XABD cross-attn (1,I,F*E)<-(1,N,F*E)")
    return blocks


def parameter_groups(model: torch.nn.Module) -> dict[str, int]:
    groups: dict[str, int] = {}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            key = name.split(".")[0]
            groups[key] = groups.get(key, 0) + parameter.numel()
    return groups


def add_missing_step_hooks(optimizer: torch.optim.Optimizer) -> bool:
    """Give their Lookahead the (empty) step-hook tables that torch >= 2.0's ``step`` wrapper reads.

    Lookahead never calls ``Optimizer.__init__``, which makes them; torch's own ``__setstate__`` adds
    them the same way to optimizers pickled by older versions. Nothing else changes.
    """
    missing = False
    for name in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"):
        if name not in optimizer.__dict__:
            setattr(optimizer, name, OrderedDict())
            missing = True
    return missing


def peak_rss_mib() -> float:
    scale = 1 if platform.system() == "Darwin" else 1024  # bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**20


def official_commit(root: Path, given: str | None) -> str | None:
    if given:
        return given
    path = root / COMMIT_FILE
    return path.read_text().strip() if path.is_file() else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--official-root", type=Path, required=True, help="folder of the official code")
    parser.add_argument("--official-commit", default=None, help=f"else read from <root>/{COMMIT_FILE}")
    parser.add_argument("--n", type=int, default=8192, help="rows in the batch (> num_inds_I = 10)")
    parser.add_argument("--steps", type=int, default=2, help="timed steps")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps first")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=42)
    opts = parser.parse_args()

    root = opts.official_root.resolve()
    torch.set_num_threads(opts.threads)
    np.random.seed(opts.seed)  # their masking draws from numpy's global generator
    torch.manual_seed(opts.seed)

    stubbed = stub_missing_imports()
    sys.path.insert(0, str(root))
    from npt.configs import build_parser
    from npt.loss import Loss
    from npt.mask import mask_data_for_dataset_mode
    from npt.model.npt import NPTModel
    from npt.utils.train_utils import count_parameters, init_optimizer

    script_args = protein_spin_args(root)
    c = build_config(build_parser, script_args, opts.n)
    if opts.n <= c.num_inds_I:
        raise SystemExit(f"--n must exceed num_inds_I = {c.num_inds_I} (their model has no decoder then)")

    # Data and masks, as their NPTBatchDataset.batch_gen makes them (once per epoch, in the loader).
    ground_truth = protein_shaped_data(opts.n, opts.seed)
    label_cells = torch.zeros(opts.n, D, dtype=torch.bool)
    label_cells[:, TARGET_COL] = True
    no_cells = torch.zeros_like(label_cells)
    start = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        masked, label_mask, augmentation_mask = mask_data_for_dataset_mode(
            label_cells,  # every label is masked in train mode
            {"train": label_cells, "val": no_cells, "test": no_cells},  # all rows are train rows
            c,
            [],  # no categorical column
            ~label_cells,  # BERT masking candidates: every feature cell (none missing)
            ground_truth,
            "train",
            "cpu",
        )
    mask_seconds = time.perf_counter() - start
    batch_dict = {
        "train_mask_matrix": label_cells,
        "cat_features": [],
        "sigmas": [1.0] * D,
        "target_cols": [TARGET_COL],
    }
    metadata = {
        "N": opts.n,
        "D": D,
        "input_feature_dims": [t.shape[1] for t in ground_truth],
        "cat_features": [],
        "num_features": list(range(D)),
        "cat_target_cols": [],
        "num_target_cols": [TARGET_COL],
        "auroc_setting": False,
    }

    rss_before_model = peak_rss_mib()
    with contextlib.redirect_stdout(sys.stderr):
        model = NPTModel(c, metadata=metadata, device="cpu").to(device="cpu").type(torch.float32)
        optimizer = init_optimizer(c=c, model_parameters=model.parameters(), device="cpu")
        patched_optimizer = add_missing_step_hooks(optimizer)
        tradeoff = types.SimpleNamespace(curr_tradeoff=c.exp_tradeoff)  # their annealer at step 0
        loss = Loss(
            c, metadata, is_minibatch_sgd=c.exp_minibatch_sgd, device="cpu", tradeoff_annealer=tradeoff
        )
    model.train()

    def step() -> float:
        output = model(masked, dataset_mode="train")
        loss.compute(
            output=output,
            ground_truth_data=ground_truth,
            data_dict=batch_dict,
            label_mask_matrix=label_mask,
            augmentation_mask_matrix=augmentation_mask,
            dataset_mode="train",
            eval_model=False,
        )
        total = loss.finalize_batch_losses()["total_loss"]
        total.backward()  # their gradient hooks clamp each element to [-clip, clip]
        optimizer.step()
        optimizer.zero_grad()
        loss.update_losses(eval_model=False)
        loss.reset()
        return float(total.detach())

    step_seconds, losses, rates = [], [], []  # rates: the matmul rate before each timed step, after the last
    with contextlib.redirect_stdout(sys.stderr):
        for index in range(opts.warmup + opts.steps):
            if index >= opts.warmup:
                rates.append(matmul_rate(opts.threads, RATE_PROBE_SECONDS))
            start = time.perf_counter()
            value = step()
            elapsed = time.perf_counter() - start
            if index >= opts.warmup:
                step_seconds.append(elapsed)
                losses.append(value)
        rates.append(matmul_rate(opts.threads, RATE_PROBE_SECONDS))
        peak = peak_rss_mib()
        counter = FlopCounterMode(display=False)  # one more step, counted (matrix products)
        with counter:
            step()
    flops = int(counter.get_total_flops())

    record = {
        "harness": "official_spin_step",
        "official_commit": official_commit(root, opts.official_commit),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": opts.threads,
        "n": opts.n,
        "warmup_steps": opts.warmup,
        "step_seconds": [round(s, 4) for s in step_seconds],
        "median_step_seconds": round(statistics.median(step_seconds), 4) if step_seconds else None,
        "matmul_gflops_around_steps": rates,
        "flops_per_step": flops,
        "mask_seconds": round(mask_seconds, 4),
        "peak_rss_mib": round(peak, 1),
        "peak_rss_before_model_mib": round(rss_before_model, 1),
        "peak_rss_rise_mib": round(peak - rss_before_model, 1),
        "parameters": count_parameters(model),
        "parameters_by_module": parameter_groups(model),
        "loss": "official npt.loss.Loss total_loss (tradeoff * feature MSE + (1 - tradeoff) * label MSE)",
        "loss_values": [round(v, 5) for v in losses],
        "optimizer": f"official {c.exp_optimizer} (npt.utils.train_utils.init_optimizer), lr {c.exp_lr}",
        "optimizer_patched_step_hooks": patched_optimizer,
        "gradient_clipping": f"official per-element clamp to +-{c.exp_gradient_clipping} (model hooks)",
        "not_in_step": ["lr scheduler step (needs fairseq/transformers)", "masking (data loader, per epoch)"],
        "stubbed_imports": stubbed,
        "settings": {
            "script_args": script_args,
            "exp_batch_size": c.exp_batch_size,
            "columns": D,
            "input_feature_dims": metadata["input_feature_dims"],
            "target_col": TARGET_COL,
            "model_dim_hidden": c.model_dim_hidden,
            "model_num_heads": c.model_num_heads,
            "model_stacking_depth": c.model_stacking_depth,
            "num_inds_I": c.num_inds_I,
            "num_inds_F": c.num_inds_F,
            "startAttBlock": c.startAttBlock,
            "ABLA": c.ABLA,
            "enableEncoder": c.enableEncoder,
            "decoderBoth": c.decoderBoth,
            "factor_embed_ABD": c.factor_embed_ABD,
            "model_hidden_dropout_prob": c.model_hidden_dropout_prob,
            "model_att_score_dropout_prob": c.model_att_score_dropout_prob,
            "model_augmentation_bert_mask_prob": c.model_augmentation_bert_mask_prob,
            "model_label_bert_mask_prob": c.model_label_bert_mask_prob,
            "model_bert_mask_percentage": c.model_bert_mask_percentage,
            "exp_tradeoff": c.exp_tradeoff,
            "exp_gradient_clipping": c.exp_gradient_clipping,
            "exp_lr": c.exp_lr,
            "exp_optimizer": c.exp_optimizer,
            "masked_feature_cells": int(augmentation_mask.sum()),
            "masked_label_cells": int(label_mask.sum()),
            "encoder_blocks": describe_encoder(model),
            "decoder": [
                type(getattr(model, name)).__name__ + f" {name}"
                for name in ("convert_X_ABA", "convert_X_ABD")
                if hasattr(model, name)
            ],
        },
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
