"""``GenotypeImputer``: impute untyped sites of target haplotypes from a phased reference panel.

The imputer works in the coordinates of one reference panel: ``fit(panel, typed)`` takes the panel
(``HaplotypePanel``) and a bool mask of its *typed* (array) sites, cuts windows (see
:mod:`.windows`), and trains a table model on the reference haplotypes of each window; ``impute``
takes target genotypes at the panel's sites (-1 where unknown) and returns every haplotype's ALT
probability at every site.

Models, by ``model``:

- ``"copy"`` (the default): haplotype copying (Li and Stephens), each target haplotype a mosaic of
  the reference haplotypes that match it locally, decoded by forward-backward along each contig's
  typed sites (see :mod:`.copying`); nothing is trained: ``fit`` stores the panel and picks ``ne``
  on held-out reference samples; it uses windows only to choose which typed sites to phase;
- any table model of :mod:`semiparam.models.registry` (``"npt"``, ``"spin"``...), trained through
  :class:`~semiparam.estimators.learner.TableLearner` with chunk masking (spec-spin section 3.2):
  each step hides *all* target tokens of a fraction ``p_target`` of the batch's rows, the other
  rows show theirs, so the model learns to copy targets from reference rows whose inputs match;
- ``"knn"``: the nearest-haplotype baseline, the mean target alleles of the ``k`` reference
  haplotypes closest in Hamming distance at the window's inputs (``k`` picked on held-out
  reference haplotypes when ``knn_neighbors`` is None).

``mode="per_window"`` trains one model per window (spec-spin Table 3/7). ``mode="shared"`` trains
one model for all windows, each step drawing one window and a batch of its rows, and predicts a
window by giving the model that window's reference haplotypes as context (NPT: rows to attend to;
SPIN: encoded into inducing points): the paper's meta-learned model across genome regions
(section 4.4, Tables 4/8).

Missing genotypes at typed sites are filled too: their K-mer token is hidden from the model and
predicted from the other inputs, conditionally on the bits of the K-mer that are known.
Unphased targets (the normal output of a genotyping array) are phased before imputation, in
overlapping segments of typed sites stitched in phase (:func:`.copying.phase_typed_sites`):
``unphased="phase"`` (default) by Viterbi decoding of a diploid copying model
(:func:`.copying.phase_diploid`), ``"match"`` by the older best-match heuristic
(:func:`.phasing.phase_window`); ``"error"`` refuses them. Phased inputs keep their phase.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import math
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pandas as pd
import torch

from .._config import ConfigError, legacy_keys
from .._io import available_device, digest, read_json
from ..data.columns import CATEGORICAL
from ..data.genotypes import HaplotypePanel, VariantSites
from ..data.table import ColumnSpec, TableEncoder, TableSchema
from ..estimators.base import canonical_model_options
from ..estimators.learner import TableLearner, TrainConfig, resolve_device
from ..estimators.model_dir import read_model_dir, save_model_dir
from ..models.registry import get_model, model_names
from ..parallel import check_executor, map_tasks, resolve_executor
from .copying import (
    NE_GRID,
    CopyingSettings,
    copy_impute,
    genetic_positions,
    phase_typed_sites,
    read_genetic_map,
)
from .phasing import check_phased, unphased_heterozygotes
from .presets import Mode, genomics_configs
from .windows import (
    Window,
    WindowSpec,
    gather_bits,
    plan_windows,
    token_bit_probabilities,
    tokenize,
    window_columns,
)

COPYING = "copy"
BASELINES = ("knn", COPYING)  # models without a trained network
UNPHASED = ("phase", "match", "error")


class GenotypeImputer:
    """Impute untyped sites from a phased reference panel (see the module docstring).

    Parameters
    ----------
    model : str
        "copy" (haplotype copying, the default), a registered table model
        (``semiparam.models.registry.model_names()``: "npt", "spin") or "knn" (nearest-haplotype
        baseline).
    mode : {"per_window", "shared"}
        One model per window, or one meta-learned model shared by all windows.
    preset : {"cpu", "paper16", "paper64"}
        Model and training preset (see ``genomics_configs``).
    n_inputs, window_targets, overlap, kmer : int
        Window shape: typed sites per window, untyped sites per window, overlap between consecutive
        windows (in untyped sites), alleles per token.
    min_mac : int
        Untyped sites whose ALT count in the panel is below ``min_mac`` (or above n - min_mac) are not
        modelled; they get the panel's allele frequency.
    max_steps : int, optional
        Training steps (per window, or in all for ``mode="shared"``); overrides the preset.
    knn_neighbors : int, optional
        ``k`` of the "knn" model; None picks it on held-out reference haplotypes.
    unphased : {"phase", "match", "error"}
        What to do with unphased heterozygous target genotypes at typed sites: phase them with the
        diploid copying model (default), with the best-match heuristic, or refuse them.
    genetic_map : str or Path, optional
        PLINK (``chrom id cM bp``) or SHAPEIT (``pos chr cM``) genetic map; default 1 cM per Mb.
    copying : dict, optional
        Settings of the copying model and of phasing (:class:`.copying.CopyingSettings`: ``ne``,
        ``error``, ``n_candidates``).
    model_options, train_options : dict, optional
        Further model-config / ``TrainConfig`` fields; unknown keys raise.
    device : str
        "cpu", "cuda", "cuda:1"...
    random_state : int
    verbose : bool or None
        Progress bars (None: only on a terminal).
    log : callable, optional
        Called with one-line progress messages (the CLI prints them).
    executor : {"serial", "ray"}
        Where the per-window models are trained: one after another in this process (default) or
        as Ray tasks (``pip install 'semiparam[distributed]'``), each with this process's thread
        count; the fitted imputer is the same either way. The shared model is one fit, always here.
    ray_address : str, optional
        With ``executor="ray"``: the cluster to join; None starts Ray on this machine.
    backend : {"serial", "ray"}, optional
        Deprecated: the old name of ``executor`` (a FutureWarning at fit).
    """

    def __init__(
        self,
        model: str = COPYING,
        *,
        mode: Mode = "per_window",
        preset: str = "cpu",
        n_inputs: int = 150,
        window_targets: int = 100,
        overlap: int = 20,
        kmer: int = 5,
        min_mac: int = 1,
        max_steps: int | None = None,
        knn_neighbors: int | None = None,
        unphased: Literal["phase", "match", "error"] = "phase",
        genetic_map: str | Path | None = None,
        copying: dict[str, Any] | None = None,
        model_options: dict[str, Any] | None = None,
        train_options: dict[str, Any] | None = None,
        device: str = "auto",
        random_state: int = 0,
        verbose: bool | None = None,
        log: Callable[[str], None] | None = None,
        executor: str = "serial",
        ray_address: str | None = None,
        backend: str | None = None,
    ) -> None:
        self.model = model
        self.mode = mode
        self.preset = preset
        self.n_inputs = n_inputs
        self.window_targets = window_targets
        self.overlap = overlap
        self.kmer = kmer
        self.min_mac = min_mac
        self.max_steps = max_steps
        self.knn_neighbors = knn_neighbors
        self.unphased = unphased
        self.genetic_map = genetic_map
        self.copying = copying
        self.model_options = model_options
        self.train_options = train_options
        self.device = device
        self.random_state = random_state
        self.verbose = verbose
        self.log = log
        self.executor = executor
        self.ray_address = ray_address
        self.backend = backend  # deprecated: the old name of executor

    # -- configuration --------------------------------------------------------------------------
    @property
    def spec(self) -> WindowSpec:
        return WindowSpec(self.n_inputs, self.window_targets, self.overlap, self.kmer)

    def _check_params(self) -> str:
        """Check the parameters; the executor the per-window models train on: ``executor``, or
        ``backend`` (its old name, deprecated: a FutureWarning) when that was given."""
        if self.model not in BASELINES and self.model not in model_names():
            raise ConfigError(f"unknown model {self.model!r}; available: {model_names() + list(BASELINES)}")
        if self.mode not in ("per_window", "shared"):
            raise ConfigError(f"mode must be 'per_window' or 'shared', got {self.mode!r}")
        if self.unphased not in UNPHASED:
            raise ConfigError(f"unphased must be one of {UNPHASED}, got {self.unphased!r}")
        self.copying_settings  # validates  # noqa: B018
        if self.min_mac < 0:
            raise ConfigError(f"min_mac must be >= 0, got {self.min_mac}")
        if self.knn_neighbors is not None and self.knn_neighbors < 1:
            raise ConfigError(f"knn_neighbors must be >= 1 or None, got {self.knn_neighbors}")
        resolve_device(self.device)
        self.spec  # validates the window shape  # noqa: B018
        executor = resolve_executor(self.executor, self.backend, stacklevel=3)
        check_executor(executor, self.ray_address)
        return executor

    @property
    def copying_settings(self) -> CopyingSettings:
        fields = dict(self.copying or {})
        known = {f.name for f in dataclasses.fields(CopyingSettings)}
        unknown = set(fields) - known
        if unknown:
            raise ConfigError(f"unknown copying setting(s) {sorted(unknown)}; known: {sorted(known)}")
        return CopyingSettings(**fields)

    def _configs(self) -> tuple[Any, TrainConfig]:
        train = dict(self.train_options or {})
        if self.max_steps is not None:
            if "max_steps" in train:
                raise ConfigError("max_steps given both as an argument and in train_options")
            train["max_steps"] = self.max_steps
        return genomics_configs(
            self.model, self.preset, mode=self.mode, model_options=self.model_options, train_options=train
        )

    def _say(self, message: str) -> None:
        if self.log is not None:
            self.log(message)

    def _schema(self) -> TableSchema:
        inputs, targets = window_columns(self.spec)
        cats = tuple(range(self.spec.n_classes))
        return TableSchema(tuple(ColumnSpec(c, CATEGORICAL, cats) for c in inputs + targets), tuple(targets))

    # -- fitting --------------------------------------------------------------------------------
    def fit(self, panel: HaplotypePanel, typed: np.ndarray | None = None) -> GenotypeImputer:
        """Fit on ``panel``; ``typed (n_sites,)`` bool marks the sites targets will be typed at.

        ``typed=None`` ("copy" and "knn" only, ``semiparam fit-panel``): the panel is stored and the
        windows are planned for the typed sites of the targets when they come (:meth:`retarget`,
        called by :meth:`impute`). The table models are trained for given typed sites.
        """
        executor = self._check_params()
        if panel.n_haplotypes < 2:
            raise ValueError(f"the reference panel has {panel.n_haplotypes} haplotype(s); need at least 2")
        if typed is None and self.model not in BASELINES:
            raise ValueError(
                f"model {self.model!r} is trained for the targets' typed sites: give typed "
                "(fit-panel --array-sites); only 'copy' and 'knn' fit a panel alone"
            )
        start = time.perf_counter()
        self.sites_ = panel.sites
        self.contig_lines_ = list(panel.contig_lines)
        self.alt_frequency_ = panel.alt_counts() / panel.n_haplotypes
        self.reference_ = panel.haplotypes  # (n_sites, n_hap) uint8
        gmap = read_genetic_map(self.genetic_map) if self.genetic_map is not None else None
        self.cm_ = genetic_positions(panel.sites.chrom, panel.sites.pos, gmap)
        self.typed_: np.ndarray | None = None
        self.windows_: list[Window] = []
        self.modelled_ = np.zeros(panel.n_sites, dtype=bool)
        self.copying_ = self.copying_settings
        self.learners_: list[TableLearner] = []
        if typed is not None:
            self._plan(typed)
            if self.model in BASELINES:
                pass
            elif self.mode == "per_window" and executor == "ray":
                task = functools.partial(_fit_window_files, copy.copy(self)._without_log())
                packed = map_tasks(
                    task, list(enumerate(self.windows_)), executor="ray", address=self.ray_address
                )
                self.learners_ = [TableLearner.from_files(f, device=self.device) for f in packed]
            elif self.mode == "per_window":
                self.learners_ = [
                    self._fit_window(w, k) for k, w in enumerate(self._progress(self.windows_, "windows"))
                ]
            else:
                self.learners_ = [self._fit_shared()]
        else:
            self._say(f"panel stored: {panel.n_sites} sites, {panel.n_haplotypes} haplotypes")
        self.fit_seconds_ = time.perf_counter() - start
        return self

    def retarget(self, typed: np.ndarray) -> GenotypeImputer:
        """Plan the windows of a "copy" or "knn" imputer for other typed sites (and pick its
        settings again on held-out reference samples); nothing happens when they are the same."""
        self._check_fitted()
        typed = np.asarray(typed, dtype=bool)
        if self.typed_ is not None and typed.shape == self.typed_.shape and (typed == self.typed_).all():
            return self
        if self.model not in BASELINES:
            raise ValueError(
                f"a fitted {self.model!r} imputer serves the typed sites it was trained for only"
            )
        self._plan(typed)
        return self

    def _plan(self, typed: np.ndarray) -> None:
        """Typed sites, windows and the settings picked on held-out reference samples."""
        n_sites = len(self.sites_)
        typed = np.asarray(typed, dtype=bool)
        if typed.shape != (n_sites,):
            raise ValueError(f"typed has shape {typed.shape}, expected ({n_sites},) (one per panel site)")
        if not typed.any():
            raise ValueError("no typed site: the targets share no site with the reference panel")
        self.typed_ = typed
        n_hap = self.reference_.shape[1]
        alt = np.rint(self.alt_frequency_ * n_hap)
        polymorphic = (alt >= max(self.min_mac, 1)) & (n_hap - alt >= max(self.min_mac, 1))
        self.modelled_ = ~typed & polymorphic
        sites = self.sites_
        self.windows_ = plan_windows(sites.chrom, sites.pos, typed, self.modelled_, self.spec)
        self._say(
            f"{len(self.windows_)} windows of {self.spec.window_targets} untyped sites "
            f"({int(self.modelled_.sum())} modelled, {int((~typed & ~polymorphic).sum())} monomorphic or "
            f"below min_mac) with {self.spec.n_inputs} typed inputs each; {n_hap} reference haplotypes"
        )
        self.copying_ = self.copying_settings
        if self.copying_.ne is None and (self.model == COPYING or self.unphased == "phase"):
            ne = self._pick_ne(dataclasses.replace(self.copying_, ne=NE_GRID[0]))
            self.copying_ = dataclasses.replace(self.copying_, ne=ne)
        if self.model == "knn":
            self.neighbors_ = self.knn_neighbors or self._pick_k()

    def _progress(self, items: list[Any], description: str) -> Any:
        enabled = sys.stderr.isatty() if self.verbose is None else self.verbose
        if not enabled or len(items) < 2:
            return items
        from tqdm.auto import tqdm

        return tqdm(items, desc=description, leave=False)

    def _reference_tokens(self, window: Window, rows: np.ndarray | None = None) -> np.ndarray:
        """Reference haplotypes of ``window`` as tokens ``(n_rows, n_columns)``: inputs, then targets."""
        ref = self.reference_ if rows is None else self.reference_[:, rows]
        bits_in = gather_bits(ref, window.inputs)
        bits_out = gather_bits(ref, window.targets)
        return np.concatenate([tokenize(bits_in, self.kmer), tokenize(bits_out, self.kmer)], axis=1)

    def _frame(self, tokens: np.ndarray, columns: list[str]) -> pd.DataFrame:
        values = tokens.astype(np.float64)
        values[tokens < 0] = np.nan
        return pd.DataFrame(values, columns=columns)

    def _new_learner(self, seed: int, verbose: bool = False) -> TableLearner:
        model_config, train_config = self._configs()
        return TableLearner(
            self.model, model_config, train_config, device=self.device, seed=seed, verbose=verbose
        )

    def _fit_window(self, window: Window, index: int) -> TableLearner:
        schema = self._schema()
        frame = self._frame(self._reference_tokens(window), schema.names)
        learner = self._new_learner(self.random_state + index)
        return learner.fit(frame, schema)

    def _without_log(self) -> GenotypeImputer:
        self.log = None  # a Ray task has nowhere to print; the caller's log stays with the caller
        return self

    def _fit_shared(self) -> TableLearner:
        """One model for all windows: each step trains on a batch of one random window's rows."""
        schema = self._schema()
        learner = self._new_learner(self.random_state, verbose=self.verbose)
        tables = [self._reference_tokens(w) for w in self.windows_]  # each (n_hap, d)
        encoder = TableEncoder.fit(self._frame(tables[0], schema.names), schema)
        device = learner.device
        values = [torch.as_tensor(t.astype(np.float32), device=device) for t in tables]
        n_rows = tables[0].shape[0]
        missing = torch.zeros(n_rows, len(schema.names), dtype=torch.bool, device=device)
        rng = np.random.default_rng(self.random_state)
        batch = min(learner.train_config.batch_size, n_rows)

        def next_batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
            w = int(rng.integers(len(values)))
            idx = torch.as_tensor(rng.choice(n_rows, size=batch, replace=False), device=device)
            return values[w][idx], missing[idx]

        # a context of its own (the first window), so the learner is complete and can be saved;
        # prediction replaces it with each window's reference haplotypes
        context = encoder.transform(self._frame(tables[0], schema.names))
        return learner.fit_batches(encoder, next_batch, context, label=f"{self.model} shared fit")

    def _pick_k(self) -> int:
        """k of the nearest-haplotype baseline: best pooled r^2 on 10% held-out reference
        haplotypes over (up to) 8 windows."""
        rng = np.random.default_rng(self.random_state)
        n_hap = self.reference_.shape[1]
        n_val = max(1, n_hap // 10)
        perm = rng.permutation(n_hap)
        val, train = perm[:n_val], perm[n_val:]
        windows = [self.windows_[i] for i in rng.permutation(len(self.windows_))[:8]]
        candidates = [k for k in (1, 2, 4, 8, 16, 32, 64) if k <= len(train)]
        truth, preds = [], {k: [] for k in candidates}
        for w in windows:
            real = w.targets >= 0
            q_bits = gather_bits(self.reference_[:, val], w.inputs)
            r_in = gather_bits(self.reference_[:, train], w.inputs)
            r_out = gather_bits(self.reference_[:, train], w.targets)[:, real]
            truth.append(gather_bits(self.reference_[:, val], w.targets)[:, real].ravel())
            for k in candidates:
                preds[k].append(_knn_predict(q_bits, r_in, r_out, k).ravel())
        y = np.concatenate(truth).astype(np.float64)
        best, best_r2 = candidates[0], -1.0
        for k in candidates:
            r2 = _pearson_r2(y, np.concatenate(preds[k]))
            if r2 > best_r2:
                best, best_r2 = k, r2
        self._say(f"knn: k={best} (held-out r2 {best_r2:.4f})")
        return best

    # -- prediction -----------------------------------------------------------------------------
    def impute(
        self,
        alleles: np.ndarray,
        phased: np.ndarray | None = None,
        *,
        checkpoint: str | Path | None = None,
        n_jobs: int = 1,
    ) -> np.ndarray:
        """ALT probability of each haplotype at every panel site.

        ``alleles (n_sites, n_samples, 2)`` int8 at the panel's sites: 0/1, -1 where unknown (untyped
        sites, missing genotypes). ``phased (n_sites, n_samples)`` bool, default all True. Returns
        ``(n_sites, n_samples, 2)`` float32; typed observed alleles are returned as they are.

        ``checkpoint``: a directory where each finished window's result is written; a later call
        with the same inputs and imputer reads the windows found there instead of computing them
        again (a killed run resumes; one of other inputs raises). ``n_jobs``: windows computed at
        once in threads ("knn"; the table models run one window at a time). "copy" has no windows:
        it runs one forward-backward pass along each contig.
        """
        self._check_fitted()
        alleles = np.asarray(alleles)
        n_sites = len(self.sites_)
        if alleles.ndim != 3 or alleles.shape[0] != n_sites or alleles.shape[2] != 2:
            raise ValueError(f"alleles must have shape ({n_sites}, n_samples, 2), got {alleles.shape}")
        if self.typed_ is None:  # a panel fitted alone: typed where any allele is given
            self.retarget((alleles >= 0).any(axis=(1, 2)))
        assert self.typed_ is not None
        if n_jobs < 1:
            raise ValueError(f"n_jobs must be >= 1, got {n_jobs}")
        n_samples = alleles.shape[1]
        if phased is None:
            phased = np.ones(alleles.shape[:2], dtype=bool)
        if phased.shape != alleles.shape[:2]:
            raise ValueError(f"phased has shape {phased.shape}, expected {alleles.shape[:2]}")
        alleles = np.where(self.typed_[:, None, None], alleles, -1).astype(np.int8)  # inputs only
        unphased_het = unphased_heterozygotes(alleles, phased)
        if self.unphased == "error":
            check_phased(alleles, phased, self.sites_)
        haps = alleles.reshape(n_sites, 2 * n_samples)
        total = np.zeros((n_sites, 2 * n_samples), dtype=np.float64)
        weight = np.zeros(n_sites, dtype=np.float64)
        typed_idx = np.flatnonzero(self.typed_)
        typed_row = np.full(n_sites, -1, dtype=np.int64)
        typed_row[typed_idx] = np.arange(len(typed_idx))
        typed_sum = np.zeros((len(typed_idx), 2 * n_samples), dtype=np.float64)
        typed_count = np.zeros((len(typed_idx), 2 * n_samples), dtype=np.float64)
        needs_phasing = bool(unphased_het.any())

        # unphased inputs: phased once, segment by segment along each contig (not per window)
        phased_haps = self._phase_inputs(alleles, phased) if needs_phasing else haps
        freq = self.alt_frequency_[:, None]
        if self.model == COPYING:  # one pass along each contig, no windows (as Beagle's HMM)
            p = copy_impute(
                self.reference_,
                self.cm_,
                self.sites_.chrom,
                self.typed_,
                phased_haps,
                self.modelled_,
                self.copying_,
            )
            out = np.where(np.isnan(p), freq, p).astype(np.float64)
            t_haps = phased_haps[typed_idx]
            out[typed_idx] = np.where(t_haps >= 0, t_haps.astype(np.float64), out[typed_idx])
            self.phased_inputs_ = phased_haps
            return out.reshape(n_sites, n_samples, 2).astype(np.float32)

        store = (
            _WindowStore(Path(checkpoint), self._run_fingerprint(alleles, phased))
            if checkpoint is not None
            else None
        )

        def window_result(k: int) -> _WindowResult:
            if store is not None and (done := store.load(k)) is not None:
                return done
            result = _WindowResult(*self._predict_window(k, self.windows_[k], phased_haps))
            if store is not None:
                store.save(k, result)
            return result

        threads = n_jobs if self.model in BASELINES else 1
        with ThreadPoolExecutor(max_workers=threads) as pool:
            results = pool.map(window_result, range(len(self.windows_))) if threads > 1 else None
            for k, window in enumerate(self._progress(self.windows_, "imputing")):
                r = next(results) if results is not None else window_result(k)
                real = window.targets >= 0
                t_idx = window.targets[real]
                w = window.target_weights[real]
                total[t_idx] += w[:, None] * r.target_p[:, real].T
                weight[t_idx] += w
                if r.input_p is not None:
                    used = window.inputs >= 0
                    i_rows = typed_row[window.inputs[used]]
                    typed_sum[i_rows] += r.input_p[:, used].T
                    typed_count[i_rows] += 1.0
        out = np.where(weight[:, None] > 0, total / np.where(weight > 0, weight, 1.0)[:, None], freq)
        # typed sites: observed alleles; missing ones from the windows' reconstruction, else AF
        t_haps = phased_haps[typed_idx]
        filled = np.where(typed_count > 0, typed_sum / np.maximum(typed_count, 1.0), freq[typed_idx])
        out[typed_idx] = np.where(t_haps >= 0, t_haps.astype(np.float64), filled)
        self.phased_inputs_ = phased_haps  # (n_sites, 2 n_samples): the typed alleles as phased
        return out.reshape(n_sites, n_samples, 2).astype(np.float32)

    def _run_fingerprint(self, alleles: np.ndarray, phased: np.ndarray) -> str:
        """What a window checkpoint must match: the inputs, the settings and the fitted state."""
        arrays = [np.asarray(a) for a in (alleles, phased, self.typed_, self.cm_)]
        fitted = {"copying": dataclasses.asdict(self.copying_), "windows": len(self.windows_)}
        # one fitted model, not another
        fitted_at = [str(getattr(self, "fit_seconds_", ""))] if self.learners_ else []
        return digest(*arrays, [self._fingerprint_params(), fitted], *fitted_at, length=32)

    def impute_haplotypes(self, haplotypes: np.ndarray) -> np.ndarray:
        """Phased convenience form: ``haplotypes (n_sites, n_haplotypes)`` (0/1, -1 unknown) ->
        ``(n_sites, n_haplotypes)`` ALT probabilities."""
        haplotypes = np.asarray(haplotypes)
        if haplotypes.ndim != 2 or haplotypes.shape[1] % 2:
            raise ValueError(f"haplotypes must be (n_sites, 2 * n_samples), got {haplotypes.shape}")
        n_sites, n_hap = haplotypes.shape
        out = self.impute(haplotypes.reshape(n_sites, n_hap // 2, 2))
        return out.reshape(n_sites, n_hap)

    def _needs_reference(self) -> bool:
        """Whether prediction reads the panel's haplotypes (else only the fitted models)."""
        return self.mode == "shared" or self.model in BASELINES or self.unphased != "error"

    def _window_inputs(self, windows: list[Window] | None = None) -> np.ndarray:
        """Bool per panel site: typed sites that are an input of some window (those phased)."""
        used = np.zeros(len(self.sites_), dtype=bool)
        for w in self.windows_ if windows is None else windows:
            used[w.inputs[w.inputs >= 0]] = True
        return used

    def _phase_inputs(self, alleles: np.ndarray, phased: np.ndarray) -> np.ndarray:
        """``(n_sites, 2 n_samples)`` haplotypes with the typed sites phased (see
        :func:`.copying.phase_typed_sites`) where they are a window's input: by the diploid copying
        model, or the best-match heuristic with ``unphased="match"``."""
        if self.reference_ is None:
            raise RuntimeError("phasing needs the reference haplotypes; this imputer was saved without them")
        return phase_typed_sites(
            self.reference_,
            self.cm_,
            self.sites_.chrom,
            self._window_inputs(),
            alleles,
            phased,
            self.copying_,
            self.random_state,
            segment=self.spec.n_inputs,
            method="match" if self.unphased == "match" else "copy",
        )

    def _pick_ne(self, settings: CopyingSettings) -> float:
        """``ne`` of the copying model: best pooled dosage r^2 of held-out reference samples (10%,
        at most 32) imputed from the other samples' haplotypes at the untyped sites of up to 4
        windows. The held-out genotypes are given unphased when this imputer phases (an array's
        normal output), phased otherwise."""
        rng = np.random.default_rng(self.random_state)
        n_samples = self.reference_.shape[1] // 2
        n_val = min(32, max(1, n_samples // 10))
        perm = rng.permutation(n_samples)
        val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        train_haps = np.stack([2 * train, 2 * train + 1], axis=1).ravel()
        reference = self.reference_[:, train_haps]
        truth_alleles = self.reference_.reshape(len(self.typed_), n_samples, 2)[:, val].astype(np.int8)
        alleles = np.where(self.typed_[:, None, None], truth_alleles, -1).astype(np.int8)
        unphased = self.unphased == "phase"
        if unphased:
            alleles = np.sort(alleles, axis=2)
        phased = np.full(alleles.shape[:2], not unphased)
        windows = [self.windows_[i] for i in np.sort(rng.permutation(len(self.windows_))[:4])]
        # phased once, at ne = 1e5 (the phase depends little on it), then copied at each ne
        haps = alleles.reshape(len(self.typed_), -1)
        if unphased:
            haps = phase_typed_sites(
                reference,
                self.cm_,
                self.sites_.chrom,
                self._window_inputs(windows),
                alleles,
                phased,
                dataclasses.replace(settings, ne=1e5),
                self.random_state,
                segment=self.spec.n_inputs,
            )
        wanted = np.zeros(len(self.typed_), dtype=bool)
        for w in windows:
            wanted[w.targets[w.targets >= 0]] = True
        truth = truth_alleles[wanted].sum(axis=2).ravel().astype(np.float64)
        scores: dict[float, float] = {}

        def score(ne: float) -> float:
            if ne not in scores:
                trial = dataclasses.replace(settings, ne=ne)
                p = copy_impute(reference, self.cm_, self.sites_.chrom, self.typed_, haps, wanted, trial)
                dosage = p[wanted].reshape(-1, n_val, 2).sum(axis=2).ravel()
                scores[ne] = _pearson_r2(truth, dosage)
            return scores[ne]

        best = max(NE_GRID, key=score)  # decades, then the half-decades either side of the best
        best = max((best / 10**0.5, best, best * 10**0.5), key=score)
        listed = ", ".join(f"{ne:.3g}: {r2:.4f}" for ne, r2 in sorted(scores.items()))
        self._say(f"copying: ne={best:.3g} (held-out dosage r2 by ne: {listed})")
        return best

    def _predict_window(
        self, index: int, window: Window, haps: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """``(target ALT probabilities (n_haps, target_slots), input ALT probabilities or None)``."""
        spec = self.spec
        q_in_bits = gather_bits(haps, window.inputs)  # (n_q, input_slots), -1 missing
        if self.model in BASELINES:
            r_in = gather_bits(self.reference_, window.inputs)
            r_out = gather_bits(self.reference_, window.targets)
            target_p = _knn_predict(q_in_bits, r_in, r_out, self.neighbors_)
            input_p = None
            if (q_in_bits < 0).any():
                input_p = _knn_predict(q_in_bits, r_in, r_in.astype(np.float64), self.neighbors_)
            return target_p, input_p
        learner = self.learners_[index] if self.mode == "per_window" else self.learners_[0]
        schema = learner.schema
        in_cols = schema.feature_names
        out_cols = list(schema.targets)
        if self.mode == "shared":
            learner.set_context(
                learner.encoder.transform(self._frame(self._reference_tokens(window), schema.names))
            )
        q_tokens = tokenize(q_in_bits, self.kmer)
        missing_tokens = (q_tokens < 0).any(axis=0)
        wanted = out_cols + [c for c, m in zip(in_cols, missing_tokens) if m]
        preds = learner.predict_columns(self._frame(q_tokens, in_cols), wanted, absent=out_cols)
        proba = np.stack([preds[c]["proba"] for c in out_cols], axis=1)  # (n_q, n_target_tokens, C)
        target_p = token_bit_probabilities(proba, self.kmer)
        input_p = None
        if missing_tokens.any():
            full = np.zeros((len(q_tokens), spec.n_input_tokens, spec.n_classes))
            for j, c in enumerate(in_cols):
                if missing_tokens[j]:
                    full[:, j] = preds[c]["proba"]
                else:  # observed token: a point mass
                    full[np.arange(len(q_tokens)), j, np.clip(q_tokens[:, j], 0, None)] = 1.0
            input_p = token_bit_probabilities(full, self.kmer, observed_bits=q_in_bits)
        return target_p, input_p

    # -- persistence ----------------------------------------------------------------------------
    def _check_fitted(self) -> None:
        if not hasattr(self, "sites_"):
            raise RuntimeError("this GenotypeImputer is not fitted; call fit(panel, typed) first")

    def get_params(self) -> dict[str, Any]:
        names = (
            "model",
            "mode",
            "preset",
            "n_inputs",
            "window_targets",
            "overlap",
            "kmer",
            "min_mac",
            "max_steps",
            "knn_neighbors",
            "unphased",
            "genetic_map",
            "copying",
            "model_options",
            "train_options",
            "device",
            "random_state",
            "verbose",
        )
        return {n: getattr(self, n) for n in names}

    def _fingerprint_params(self) -> dict[str, Any]:
        """:meth:`get_params` for run fingerprints: ``model_options`` keys spelt as before their
        renames (``semiparam._config.ALIASES``) whichever spelling was given, so that a run
        checkpointed before a rename still resumes."""
        params = self.get_params()
        if params["model_options"] and self.model in model_names():
            config_cls, _ = get_model(self.model)
            options = canonical_model_options(self.model, params["model_options"], warn=False) or {}
            params["model_options"] = legacy_keys(config_cls, options)
        return params

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """A model directory of kind ``genotype-imputer`` (``estimators.model_dir``):
        ``imputer.json`` (settings, sites, windows), ``reference.safetensors`` (the panel's
        haplotypes, needed by "shared" and "knn" models, left out for per-window models that do
        not keep training rows) and one model directory per window (or one shared). No pickle.
        Written aside and renamed into place; an existing ``path`` raises
        :class:`FileExistsError` unless ``overwrite``."""
        self._check_fitted()
        s = self.sites_
        meta = {
            "params": {
                **self.get_params(),
                "genetic_map": None if self.genetic_map is None else str(self.genetic_map),
            },
            "sites": {
                "chrom": s.chrom.tolist(),
                "pos": s.pos.tolist(),
                "id": s.id.tolist(),
                "ref": s.ref.tolist(),
                "alt": s.alt.tolist(),
            },
            "contig_lines": self.contig_lines_,
            "typed": None if self.typed_ is None else self.typed_.tolist(),
            "modelled": self.modelled_.tolist(),
            "alt_frequency": self.alt_frequency_.tolist(),
            "genetic_cm": self.cm_.tolist(),
            "copying_fitted": dataclasses.asdict(self.copying_),
            "windows": [w.to_dict() for w in self.windows_],
            "neighbors": getattr(self, "neighbors_", None),
            "fit_seconds": self.fit_seconds_,
        }
        tensors = {}
        if self._needs_reference():
            tensors["reference.safetensors"] = {"haplotypes": np.ascontiguousarray(self.reference_)}
        parts = {
            f"window_{k:05d}" if self.mode == "per_window" else "shared": learner.save
            for k, learner in enumerate(self.learners_)
        }
        return save_model_dir(
            path, "genotype-imputer", meta, tensors=tensors, parts=parts, overwrite=overwrite
        )

    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None) -> GenotypeImputer:
        """Load an imputer written by :meth:`save`."""
        saved = read_model_dir(path, "genotype-imputer")
        path, meta = saved.path, saved.meta
        params = dict(meta["params"])
        # saved before a key's rename (ALIASES): the options as they are spelt now, silently
        params["model_options"] = canonical_model_options(
            params["model"], params["model_options"], warn=False
        )
        params["genetic_map"] = None  # the map was read at fit time; its positions are saved
        # a model saved on a GPU loads on a machine without one
        params["device"] = device if device is not None else available_device(str(params["device"]))
        imp = cls(**params)
        s = meta["sites"]
        imp.sites_ = VariantSites.from_lists(s["chrom"], s["pos"], s["ref"], s["alt"], s["id"])
        imp.contig_lines_ = meta["contig_lines"]
        imp.typed_ = None if meta["typed"] is None else np.asarray(meta["typed"], dtype=bool)
        imp.modelled_ = np.asarray(meta["modelled"], dtype=bool)
        imp.alt_frequency_ = np.asarray(meta["alt_frequency"], dtype=np.float64)
        imp.windows_ = [Window.from_dict(w) for w in meta["windows"]]
        imp.copying_ = CopyingSettings(**meta.get("copying_fitted", {}))
        cm = meta.get("genetic_cm")  # absent in files of older versions: 1 cM per Mb
        imp.cm_ = (
            np.asarray(cm, dtype=np.float64)
            if cm is not None
            else genetic_positions(imp.sites_.chrom, imp.sites_.pos, None)
        )
        imp.fit_seconds_ = meta["fit_seconds"]
        if meta["neighbors"] is not None:
            imp.neighbors_ = int(meta["neighbors"])
        has_reference = (path / "reference.safetensors").exists()
        imp.reference_ = saved.arrays("reference.safetensors")["haplotypes"] if has_reference else None
        if imp.reference_ is None and imp._needs_reference():
            raise FileNotFoundError(f"{path} lacks reference.safetensors, which this imputer needs")
        imp.learners_ = []
        if imp.model not in BASELINES:
            dirs = (
                [path / f"window_{k:05d}" for k in range(len(imp.windows_))]
                if imp.mode == "per_window"
                else [path / "shared"]
            )
            imp.learners_ = [TableLearner.load(d, device=params["device"])[0] for d in dirs]
        return imp


@dataclasses.dataclass
class _WindowResult:
    """One window's output: ALT probabilities of the targets ``(n_haps, target_slots)`` and of
    missing inputs (or None)."""

    target_p: np.ndarray
    input_p: np.ndarray | None


class _WindowStore:
    """Finished windows of one imputation run, one ``.npz`` each, under a directory that names the
    run's fingerprint (``run.json``); written aside and renamed, so a killed run leaves whole files."""

    def __init__(self, path: Path, fingerprint: str) -> None:
        self.path = path
        claim_run_directory(path, fingerprint, "windows")

    def _file(self, k: int) -> Path:
        return self.path / f"window_{k:06d}.npz"

    def load(self, k: int) -> _WindowResult | None:
        if not self._file(k).exists():
            return None
        with np.load(self._file(k), allow_pickle=False) as z:
            got = {name: z[name] for name in z.files}
        return _WindowResult(got["target_p"], got.get("input_p"))

    def save(self, k: int, result: _WindowResult) -> None:
        arrays = {n: v for n, v in dataclasses.asdict(result).items() if v is not None}
        tmp = self.path / f".window_{k:06d}.{os.getpid()}.npz"
        np.savez(tmp, **arrays)
        tmp.replace(self._file(k))


def claim_run_directory(path: Path, fingerprint: str, unit: str) -> None:
    """Make ``path`` the checkpoint directory of the run with ``fingerprint`` (``run.json``), or
    check that it already is: a directory of another run raises rather than mixing its ``unit``
    ("windows", "chunks") into this one."""
    manifest = path / "run.json"
    if manifest.exists():
        if read_json(manifest).get("fingerprint") != fingerprint:
            raise ValueError(
                f"{path} holds {unit} of another run (other targets, panel or settings); delete it "
                "or run without resuming"
            )
        return
    path.mkdir(parents=True, exist_ok=True)
    manifest.write_text(json.dumps({"fingerprint": fingerprint}))


def _fit_window_files(imputer: GenotypeImputer, job: tuple[int, Window]) -> dict[str, bytes]:
    """One window's model, fitted and packed (the body of a Ray task)."""
    index, window = job
    return imputer._fit_window(window, index).to_files()


def _knn_predict(q_bits: np.ndarray, r_in: np.ndarray, r_out: np.ndarray, k: int) -> np.ndarray:
    """Mean of ``r_out`` over the ``k`` reference rows nearest to each query in Hamming distance at
    the query's observed bits, weighted by ``1 / (1 + distance)``. ``q_bits (n_q, s)`` (-1
    missing), ``r_in (n_r, s)``, ``r_out (n_r, t)`` -> ``(n_q, t)``."""
    obs = (q_bits >= 0).astype(np.float32)
    q = np.clip(q_bits, 0, 1).astype(np.float32)
    r = r_in.astype(np.float32)
    dist = (q * obs).sum(1, keepdims=True) + obs @ r.T - 2.0 * (q @ r.T)  # (n_q, n_r)
    k = min(k, r.shape[0])
    near = np.argpartition(dist, k - 1, axis=1)[:, :k]  # (n_q, k)
    d = np.take_along_axis(dist, near, axis=1)
    w = 1.0 / (1.0 + d)
    w /= w.sum(axis=1, keepdims=True)
    return np.einsum("qk,qkt->qt", w, r_out[near].astype(np.float64))


def _pearson_r2(y: np.ndarray, p: np.ndarray) -> float:
    if y.std() == 0 or p.std() == 0:
        return 0.0
    r = np.corrcoef(y, p)[0, 1]
    return float(r * r) if math.isfinite(r) else 0.0


__all__ = ["GenotypeImputer"]
