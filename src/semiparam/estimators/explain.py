"""Explanations of a fitted table estimator: which context rows and which features drove a
prediction (spec-weng section 2.5, features F20-F25; the NPT paper's section 6).

A model that can hide any cell of its input answers both questions by itself: hiding a feature
of a query row, or a context row's target, is what it was trained on (stochastic masking), so
the probes stay in distribution. An ensemble is explained as the average of its members: every
probe is run on each member and the members' predictions are averaged (under the members'
ensemble weights, as ``predict`` averages them) before differencing.

The quantity explained is, for a categorical target, the probability of one class (by default
the class the model predicts for that row; ``target_class`` names another) on the scale chosen
(``probability``, ``information`` = log2 p, ``log_odds`` = log2(p / (1 - p))); for a continuous
target, the predicted mean in target units. A positive score means the feature or row pushes
the prediction towards what the model predicts (its removal lowers the quantity).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from sklearn.utils import check_random_state
from sklearn.utils.validation import check_is_fitted

from ..data.columns import CATEGORICAL
from ..data.table import EncodedTable
from ..models.npt import NPT
from ..models.spin import SPIN
from ..training.masking import mask_for_inference
from ._context import PredictionContext
from ._ensemble import member_weights, weighted_mean

ROW_METHODS = ("attention", "deletion")
DELETIONS = ("row", "target")
FEATURE_METHODS = ("mask", "gradient", "lime")
SCALES = ("probability", "information", "log_odds")
SCOPES = ("row", "column")
_EPS = 1e-12


def _choice(name: str, value: Any, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; choose from {list(allowed)}")
    return value


class Explainer:
    """The fitted estimator's members, encoder, target and context, and the probes over them."""

    def __init__(self, estimator: Any, context: tuple[Any, Any] | None, target: str | None) -> None:
        check_is_fitted(estimator, "learner_")
        if getattr(estimator, "init", "random") == "pretrained":
            raise NotImplementedError(
                "explanations of the prior-fitted NPT (init='pretrained') are not available yet; "
                "explain a model trained on the table (init='random')"
            )
        self.estimator = estimator
        ensemble = estimator.learner_
        self.members = list(ensemble.members)
        self.encoder = ensemble.encoder
        schema = ensemble.schema
        targets = list(schema.targets)
        if target is None:
            if len(targets) != 1:
                raise ValueError(
                    f"the model predicts {len(targets)} targets {targets}; name one with target="
                )
            target = targets[0]
        elif target not in targets:
            raise ValueError(f"target {target!r} is not one of the model's targets {targets}")
        self.target = target
        self.targets = targets
        self.target_j = schema.names.index(target)
        self.categorical = schema.layout().kinds[self.target_j] == CATEGORICAL
        self.feature_j = [j for j, n in enumerate(schema.names) if n not in targets]
        self.feature_names = [schema.names[j] for j in self.feature_j]
        # per member: the context rows (encoded) and their positions among the rows they came from
        self.contexts: list[tuple[EncodedTable, np.ndarray] | None]
        if context is not None:
            X_ctx, y_ctx = context
            if hasattr(estimator, "_encode_labelled"):  # an estimator that encodes its own rows (images)
                enc = estimator._encode_labelled(X_ctx, y_ctx)
            else:
                enc = self.encoder.transform(estimator._context_table(X_ctx, y_ctx))
            self.contexts = [(enc, np.arange(len(enc.values)))] * len(self.members)
            self.n_context = len(enc.values)
        else:
            self.contexts = []
            for m in self.members:
                ctx = m.context
                self.contexts.append(None if ctx is None or ctx.rows is None else (ctx.rows, ctx.positions()))
            sizes = [int(c[1].max()) + 1 for c in self.contexts if c is not None and len(c[1])]
            self.n_context = max(sizes) if sizes else 0
        self.given_context = context is not None
        # a given context, per member (each encodes it with its own weights, once per explainer)
        self._given = [PredictionContext(*c) for c in self.contexts] if self.given_context else []  # type: ignore[misc]

    # -- inputs ---------------------------------------------------------------------------------
    def queries(self, X: Any) -> EncodedTable:
        if hasattr(self.estimator, "_encode_queries"):  # an estimator that encodes its own rows (images)
            return self.estimator._encode_queries(X)
        if isinstance(X, pd.DataFrame):  # a table may hold the target columns too
            X = X.drop(columns=[c for c in X.columns if str(c) in self.targets])
        frame = self.estimator._as_frame(X, reset=False)
        return self.encoder.transform(frame, absent=self.targets)

    def keeping_rows(self) -> Explainer:
        """This explainer over the members that keep their context rows: where no context is
        given and only some members keep theirs (an ensemble of NPT and SPIN members, whose SPIN
        members keep only an encoding), a view over the others; else this explainer."""
        keep = [k for k, c in enumerate(self.contexts) if c is not None]
        if self.given_context or not keep or len(keep) == len(self.members):
            return self
        view = copy.copy(self)
        view.members = [self.members[k] for k in keep]
        view.contexts = [self.contexts[k] for k in keep]
        view.n_context = max(int(c[1].max()) + 1 for c in view.contexts if len(c[1]))  # type: ignore[index]
        return view

    def require_rows(self, why: str) -> list[tuple[EncodedTable, np.ndarray]]:
        if any(c is None for c in self.contexts):
            encoded = sorted(
                {m.model_name.upper() for m, c in zip(self.members, self.contexts, strict=True) if c is None}
            )
            raise ValueError(
                f"{why} needs the context rows, and this model's {' and '.join(encoded)} members keep "
                "only their encoding; pass context=(X_train, y_train), the rows it was fitted "
                "on (or any labelled rows to predict from)"
            )
        return self.contexts  # type: ignore[return-value]

    # -- predictions ----------------------------------------------------------------------------
    def member_state(self, k: int, context: EncodedTable | None = None) -> Any:
        """Member k's encoded context: its own, or that of ``context``."""
        m = self.members[k]
        if context is not None:
            return m.encode(context)
        if self.given_context:
            return self._given[k].encoding(m.encode)
        return m.context_state()

    def member_predict(self, k: int, queries: EncodedTable, state: Any) -> np.ndarray:
        """Member k's prediction of the target: (n, C) probabilities or (n,) means."""
        m = self.members[k]
        decoded = m.decode_outputs(m.query_outputs(queries, state), [self.target])[self.target]
        return decoded["proba"] if self.categorical else decoded["mean"]

    def predict(
        self, queries: EncodedTable, contexts: Sequence[EncodedTable | None] | None = None
    ) -> np.ndarray:
        """The ensemble's prediction (members averaged under their weights), each member from its
        own context or from ``contexts[k]``."""
        preds = [
            self.member_predict(k, queries, self.member_state(k, None if contexts is None else contexts[k]))
            for k in range(len(self.members))
        ]
        return weighted_mean(preds, self.weights())

    def weights(self) -> np.ndarray:
        """Each member's weight in the explained prediction (renormalised over the members this
        explainer holds; :func:`~._ensemble.member_weights`)."""
        weights = member_weights(self.members, self.target)
        return np.full(len(self.members), 1 / len(self.members)) if weights is None else weights

    def quantity(self, pred: np.ndarray, classes: np.ndarray | None, scale: str) -> np.ndarray:
        """What is explained, per row: p(class) on ``scale``, or the mean."""
        if not self.categorical:
            return pred
        p = np.clip(pred[np.arange(len(pred)), classes], _EPS, 1 - _EPS)
        if scale == "information":
            return np.log2(p)
        if scale == "log_odds":
            return np.log2(p / (1 - p))
        return p

    def classes_for(self, base: np.ndarray, target_class: Any) -> np.ndarray | None:
        """The class explained per row: the predicted one, or ``target_class``."""
        if not self.categorical:
            if target_class is not None:
                raise ValueError("target_class applies to a categorical target only")
            return None
        if target_class is None:
            return np.argmax(base, axis=1)
        categories = list(self.encoder.schema.columns[self.target_j].categories)
        if target_class not in categories:
            raise ValueError(f"target_class {target_class!r} is not one of the classes {categories}")
        return np.full(len(base), categories.index(target_class))

    def check_scale(self, scale: str | None) -> str:
        if scale is None:
            return "probability"
        _choice("scale", scale, SCALES)
        if not self.categorical and scale != "probability":
            raise ValueError(
                f"scale={scale!r} applies to a categorical target; a continuous one is explained "
                "in its own units"
            )
        return scale

    # -- attention ------------------------------------------------------------------------------
    def member_inputs(self, k: int, queries: EncodedTable, context: EncodedTable | None) -> tuple:
        """Member k's inference module and its query (and context) tensors in its dtype."""
        m = self.members[k]
        module = m.inference_module()
        dtype = next(module.parameters()).dtype
        qv = torch.as_tensor(queries.values, device=m.device).to(dtype)
        qm = torch.as_tensor(queries.missing, device=m.device)
        q = mask_for_inference(qv, qm, hide_columns=m.target_mask())
        c = None
        if context is not None:
            cv, ch = m.context_inputs(context)
            c = (cv.to(dtype), ch)
        return module, q, c

    def member_maps(self, k: int, queries: EncodedTable, with_rows: bool) -> dict[str, Any]:
        """Member k's attention maps for ``queries`` from its encoded context (the cached one);
        SPIN's maps over the rows (``with_rows``) also need the context rows themselves."""
        m = self.members[k]
        own = self.contexts[k]
        rows = own[0] if with_rows and own is not None and isinstance(m.module, SPIN) else None
        module, (qv, qh), c = self.member_inputs(k, queries, rows)
        state = self.member_state(k)
        with torch.no_grad():
            if isinstance(module, NPT):
                return module.attention_maps(qv, qh, state)
            if isinstance(module, SPIN):
                return module.attention_maps(qv, qh, state, context=c)
        raise NotImplementedError(f"attention maps of a {m.model_name} model are not available")

    def row_attention(self, queries: EncodedTable) -> np.ndarray:
        """(n_q, n_context): attention of each query on each context row, averaged over heads,
        layers and members (under their weights; NPT: ABD weights; SPIN: query -> inducing
        points -> rows)."""
        contexts = self.require_rows("attention over rows")
        weights = self.weights()
        scores = np.zeros((len(queries.values), self.n_context))
        bs = self.members[0].train_config.predict_batch_size
        for k, (_, index) in enumerate(contexts):
            for start in range(0, len(queries.values), bs):
                part = EncodedTable(queries.values[start : start + bs], queries.missing[start : start + bs])
                maps = self.member_maps(k, part, with_rows=True)
                if "composed" in maps:
                    w = maps["composed"]
                else:  # NPT: each ABD block's weights on the context rows (the last is the row itself)
                    w = torch.stack([r[..., :-1] for r in maps["rows"]]).mean(dim=(0, 2))
                scores[start : start + bs, index] += w.double().cpu().numpy() * weights[k]
        return scores


# -- the public methods (mixed into the estimators) -----------------------------------------------


class ExplainMixin:
    """``explain_rows``, ``explain_features``, ``feature_importances`` and ``attention_maps``."""

    def explain_rows(
        self,
        X: Any,
        top_k: int = 5,
        method: str = "attention",
        *,
        deletion: str = "row",
        n_candidates: int | None = None,
        target_class: Any = None,
        context: tuple[Any, Any] | None = None,
        target: str | None = None,
    ) -> pd.DataFrame:
        """Which context rows drove the prediction of each row of ``X``.

        Returns a DataFrame with columns ``row`` (position in ``X``), ``context_row`` (position
        among the labelled rows given to ``fit``, to ``set_context``, or in ``context``), ``rank``
        (1 = most important) and ``score``, ``top_k`` rows per query.

        ``method="attention"``: the attention each query pays to each context row, averaged over
        heads, layers and ensemble members (NPT: the ABD weights; SPIN: the predictor's weights on
        the inducing points times their XABD weights on the rows). ``"deletion"``: the
        ``n_candidates`` rows with most attention (default ``max(2 * top_k, 10)``) are verified
        one by one by removing the row from the context (``deletion="row"``) or hiding only its
        target (``"target"``) and measuring the change of the prediction: the predicted class's
        probability (``target_class``: another class's) falls by ``score``; for a continuous
        target, ``score`` is the absolute change of the mean. SPIN keeps only an encoding of its
        rows: pass ``context=(X_train, y_train)``; an ensemble of NPT and SPIN members
        (``model="auto"``) without ``context`` is explained by its NPT members, which keep theirs."""
        ex = Explainer(self, context, target).keeping_rows()
        _choice("method", method, ROW_METHODS)
        _choice("deletion", deletion, DELETIONS)
        contexts = ex.require_rows("explain_rows")
        if not isinstance(top_k, (int, np.integer)) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        smallest = min(len(c[1]) for c in contexts)
        if top_k > smallest:
            raise ValueError(f"top_k={top_k} is larger than the context ({smallest} rows)")
        queries = ex.queries(X)
        attention = ex.row_attention(queries)
        if method == "attention":
            return _ranked(attention, top_k)
        m = min(smallest, n_candidates or max(2 * top_k, 10))
        if m < top_k:
            raise ValueError(f"n_candidates={m} must be at least top_k={top_k}")
        candidates = np.argsort(-attention, axis=1, kind="stable")[:, :m]  # (n_q, m)
        base = ex.predict(queries)
        classes = ex.classes_for(base, target_class)
        q0 = ex.quantity(base, classes, "probability")
        scores = np.full(attention.shape, -np.inf)
        for r in np.unique(candidates):
            rows = np.nonzero((candidates == r).any(axis=1))[0]
            part = EncodedTable(queries.values[rows], queries.missing[rows])
            changed = [_without(c, idx, r, deletion, ex.target_j) for c, idx in contexts]
            pred = ex.predict(part, changed)
            q1 = ex.quantity(pred, None if classes is None else classes[rows], "probability")
            delta = q0[rows] - q1
            scores[rows, r] = delta if ex.categorical else np.abs(delta)
        return _ranked(scores, top_k)

    def explain_features(
        self,
        X: Any,
        method: str = "mask",
        *,
        scale: str | None = None,
        scope: str = "row",
        target_class: Any = None,
        n_samples: int = 256,
        random_state: Any = None,
        context: tuple[Any, Any] | None = None,
        target: str | None = None,
    ) -> pd.DataFrame:
        """How much each feature of each row of ``X`` contributes to its prediction: a DataFrame
        of shape ``(len(X), n_features)`` with the feature names as columns.

        ``method="mask"``: the prediction decomposition by omission (spec-weng F20): the quantity
        explained (see the module docstring; ``scale`` = ``probability``, ``information`` or
        ``log_odds`` for a class) minus the same with the feature hidden in the query row
        (``scope="row"``) or in every row, context included (``scope="column"``: how much of the
        feature's effect comes through other rows too). ``"gradient"``: input x gradient of the
        quantity at the cells' embeddings, summed over the embedding (captum's
        ``LayerGradientXActivation``; the ``explain`` extra). ``"lime"``: a weighted ridge
        surrogate over ``n_samples`` random keep/hide patterns of the row's features (LIME's
        sampling and kernel); its weighted R^2 per row is in ``result.attrs["fidelity"]``."""
        ex = Explainer(self, context, target)
        _choice("method", method, FEATURE_METHODS)
        _choice("scope", scope, SCOPES)
        scale = ex.check_scale(scale)
        if scope == "column" and method != "mask":
            raise ValueError("scope='column' applies to method='mask' only")
        queries = ex.queries(X)
        base = ex.predict(queries)
        classes = ex.classes_for(base, target_class)
        q0 = ex.quantity(base, classes, scale)
        if method == "mask":
            values = _mask_attributions(ex, queries, q0, classes, scale, scope)
        elif method == "gradient":
            values = _gradient_attributions(ex, queries, classes, scale)
        else:
            values, fidelity = _lime_attributions(ex, queries, classes, scale, n_samples, random_state)
        result = pd.DataFrame(values, columns=ex.feature_names)
        if method == "lime":
            result.attrs["fidelity"] = fidelity
        result.attrs.update(method=method, scale=scale if ex.categorical else "target units", scope=scope)
        return result

    def feature_importances(
        self,
        X: Any,
        y: Any,
        *,
        scope: str = "column",
        context: tuple[Any, Any] | None = None,
    ) -> pd.DataFrame:
        """Global importance: how much worse the predictions of ``(X, y)`` get when one feature is
        hidden everywhere (``scope="column"``: in ``X`` and in the context rows; ``"row"``: in
        ``X`` only). The loss is log loss for a classifier, RMSE for a regressor; returns one row
        per feature (sorted, most important first) with ``importance`` (loss with the feature
        hidden minus the loss without) and ``loss``; ``result.attrs["loss"]`` is the full model's."""
        ex = Explainer(self, context, None)
        _choice("scope", scope, SCOPES)
        if scope == "column":
            ex.require_rows("scope='column'")
        queries = ex.queries(X)
        table = ex.estimator._context_table(X, y)
        truth = ex.encoder.transform(table).values[:, ex.target_j]

        def loss(pred: np.ndarray) -> float:
            if ex.categorical:
                p = np.clip(pred[np.arange(len(pred)), truth.astype(np.int64)], _EPS, 1.0)
                return float(-np.log(p).mean())
            mean = ex.encoder.decode_continuous(ex.target, truth.astype(np.float64))
            return float(np.sqrt(np.mean((pred - mean) ** 2)))

        full = loss(ex.predict(queries))
        rows = []
        for name, j in zip(ex.feature_names, ex.feature_j, strict=True):
            hidden = hide_column(queries, j)
            contexts = None
            if scope == "column":
                contexts = [hide_column(c, j) for c, _ in ex.contexts]  # type: ignore[misc]
            masked = loss(ex.predict(hidden, contexts))
            rows.append({"feature": name, "importance": masked - full, "loss": masked})
        result = pd.DataFrame(rows).set_index("feature").sort_values("importance", ascending=False)
        result.attrs.update(loss=full, metric="log_loss" if ex.categorical else "rmse", scope=scope)
        return result

    def attention_maps(
        self,
        X: Any,
        *,
        member: int = 0,
        max_rows: int = 64,
        context: tuple[Any, Any] | None = None,
    ) -> dict[str, Any]:
        """The attention weights behind the predictions of a few query rows ``X`` (at most
        ``max_rows``: the maps grow with the context), for ensemble member ``member``.

        NPT: ``"rows"`` ``(n_abd_blocks, n_rows, heads, n_context + 1)``, each ABD block's weights
        on the context rows and (last) on the query row itself; ``"columns"`` ``(n_aba_blocks,
        n_rows, heads, d, d)``, attribute-to-attribute weights within the query row. SPIN:
        ``"inducing_points"`` ``(n_rows, heads, h)``, and with the context rows (pass
        ``context=(X_train, y_train)``) ``"rows"`` ``(n_blocks, heads, h, n_context)`` and
        ``"composed"`` ``(n_rows, n_context)``. Also ``"context_rows"`` (the positions of the
        context rows) and ``"column_names"`` (the order of ``d``: features, then targets)."""
        ex = Explainer(self, context, None)
        if not 0 <= member < len(ex.members):
            raise ValueError(f"member must be in [0, {len(ex.members)}), got {member}")
        queries = ex.queries(X)
        if len(queries.values) > max_rows:
            raise ValueError(
                f"{len(queries.values)} query rows; attention maps are for at most max_rows={max_rows}"
            )
        maps = ex.member_maps(member, queries, with_rows=ex.contexts[member] is not None)
        out: dict[str, Any] = {}
        for key, value in maps.items():
            if isinstance(value, list):
                if value:  # (an NPT without ABA blocks has no column maps)
                    out[key] = torch.stack(value).double().cpu().numpy()
            else:
                out[key] = value.double().cpu().numpy()
        ctx = ex.contexts[member]
        out["context_rows"] = None if ctx is None else ctx[1]
        out["column_names"] = list(ex.encoder.schema.names)
        return out


def corrupted_predictions(
    estimator: Any, X: Any, *, context: tuple[Any, Any] | None = None, random_state: Any = 0
) -> np.ndarray:
    """The NPT paper's corruption test (Algorithm 1, spec-npt 6.1): each row of ``X`` predicted
    from a context whose every column (values and mask bits together, the target included) has
    been permuted across the context rows independently, a fresh permutation for every query row.
    Each column keeps its marginal distribution, but no context row is a real row any more: a
    model that predicts from other rows gets worse, a parametric one does not. Returns what
    ``predict_proba`` (categorical target) or ``predict`` returns; one context encoding per query
    row and member."""
    ex = Explainer(estimator, context, None)
    contexts = ex.require_rows("the corruption test")
    rng = check_random_state(random_state)
    queries = ex.queries(X)
    out = []
    for i in range(len(queries.values)):
        corrupted = []
        for c, _ in contexts:
            n, d = c.values.shape
            perm = np.argsort(rng.random_sample((n, d)), axis=0)  # one permutation per column
            cols = np.arange(d)
            corrupted.append(EncodedTable(c.values[perm, cols], c.missing[perm, cols]))
        row = EncodedTable(queries.values[i : i + 1], queries.missing[i : i + 1])
        out.append(ex.predict(row, corrupted))
    return np.concatenate(out)


# -- helpers --------------------------------------------------------------------------------------


def _ranked(scores: np.ndarray, top_k: int) -> pd.DataFrame:
    order = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    n_q = len(scores)
    return pd.DataFrame(
        {
            "row": np.repeat(np.arange(n_q), top_k),
            "context_row": order.reshape(-1),
            "rank": np.tile(np.arange(1, top_k + 1), n_q),
            "score": np.take_along_axis(scores, order, axis=1).reshape(-1),
        }
    )


def _without(
    context: EncodedTable, index: np.ndarray, row: int, deletion: str, target_j: int
) -> EncodedTable:
    """The context without given row ``row`` (``deletion="row"``) or with its target hidden."""
    where = index == row
    if deletion == "row":
        return EncodedTable(context.values[~where], context.missing[~where])
    return hide_column(context, target_j, where)


def hide_column(table: EncodedTable, j: int, rows: Any = slice(None)) -> EncodedTable:
    """A copy of ``table`` with column ``j`` hidden in ``rows`` (default: every row)."""
    values, missing = table.values.copy(), table.missing.copy()
    values[rows, j] = 0.0
    missing[rows, j] = True
    return EncodedTable(values, missing)


def _stacked(queries: EncodedTable, patterns: np.ndarray, feature_j: list[int]) -> EncodedTable:
    """One copy of the query rows per pattern (p,) of kept (True) / hidden features, stacked
    pattern-major: rows ``[s * n_q + i]`` = query i under pattern s."""
    n_q = len(queries.values)
    values = np.tile(queries.values, (len(patterns), 1))
    missing = np.tile(queries.missing, (len(patterns), 1))
    hide = np.repeat(~patterns, n_q, axis=0)  # (s * n_q, p)
    cols = np.asarray(feature_j)
    missing[:, cols] |= hide
    values[:, cols] = np.where(hide, 0.0, values[:, cols])
    return EncodedTable(values, missing)


def _mask_attributions(
    ex: Explainer, queries: EncodedTable, q0: np.ndarray, classes: np.ndarray | None, scale: str, scope: str
) -> np.ndarray:
    n_q, p = len(queries.values), len(ex.feature_j)
    out = np.zeros((n_q, p))
    if scope == "row":
        patterns = ~np.eye(p, dtype=bool)  # pattern j hides feature j only
        pred = ex.predict(_stacked(queries, patterns, ex.feature_j))
        for j in range(p):
            part = pred[j * n_q : (j + 1) * n_q]
            out[:, j] = q0 - ex.quantity(part, classes, scale)
        return out
    contexts = ex.require_rows("scope='column'")
    for j, col in enumerate(ex.feature_j):
        pred = ex.predict(hide_column(queries, col), [hide_column(c, col) for c, _ in contexts])
        out[:, j] = q0 - ex.quantity(pred, classes, scale)
    return out


def _lime_attributions(
    ex: Explainer,
    queries: EncodedTable,
    classes: np.ndarray | None,
    scale: str,
    n_samples: int,
    random_state: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """LIME over the features of each query row (Ribeiro et al. 2016, as spec-weng 4.10): patterns
    with K ~ U{1..p} kept features, kernel exp(-d^2 / nu^2) with d the Euclidean distance to the
    all-kept pattern and nu = 0.75 sqrt(p), a weighted ridge fit; the same patterns for every row."""
    from sklearn.linear_model import Ridge

    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2, got {n_samples}")
    rng = check_random_state(random_state)
    n_q, p = len(queries.values), len(ex.feature_j)
    patterns = np.ones((n_samples, p), dtype=bool)
    for s in range(1, n_samples):  # pattern 0 keeps everything
        kept = rng.randint(1, p + 1)
        patterns[s] = False
        patterns[s, rng.choice(p, size=kept, replace=False)] = True
    pred = ex.predict(_stacked(queries, patterns, ex.feature_j))
    z = patterns.astype(np.float64)
    weights = np.exp(-(p - z.sum(axis=1)) / (0.75**2 * p))
    out = np.zeros((n_q, p))
    fidelity = np.zeros(n_q)
    for i in range(n_q):
        rows = np.arange(n_samples) * n_q + i
        y = ex.quantity(pred[rows], None if classes is None else np.full(n_samples, classes[i]), scale)
        surrogate = Ridge(alpha=1e-3).fit(z, y, sample_weight=weights)
        out[i] = surrogate.coef_
        fidelity[i] = surrogate.score(z, y, sample_weight=weights) if np.ptp(y) > 0 else 1.0
    return out, fidelity


def _gradient_attributions(
    ex: Explainer, queries: EncodedTable, classes: np.ndarray | None, scale: str
) -> np.ndarray:
    """Input x gradient at each cell's embedding (summed over its channels), averaged over members
    under their weights."""
    try:
        from captum.attr import LayerGradientXActivation
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError("method='gradient' needs captum: pip install 'semiparam[explain]'") from err
    total = np.zeros((len(queries.values), len(ex.feature_j)))
    weights = ex.weights()
    for k in range(len(ex.members)):
        module, (qv, qh), _ = ex.member_inputs(k, queries, None)
        forward = _explained_output(ex, k, module, ex.member_state(k), classes, scale)
        attribution = LayerGradientXActivation(forward, module.embedding)
        cells = attribution.attribute(qv, additional_forward_args=(qh,)).sum(dim=-1)  # (n_q, d)
        total += cells.detach().double().cpu().numpy()[:, ex.feature_j] * weights[k]
    return total


def _explained_output(
    ex: Explainer, k: int, module: torch.nn.Module, state: Any, classes: np.ndarray | None, scale: str
) -> Any:
    """Member k's explained quantity as a differentiable function of the query inputs."""
    m = ex.members[k]
    temperature = m.temperatures.get(ex.target, 1.0)
    layout = m.schema.layout()
    std = 1.0 if ex.categorical else float(m.encoder.stds[ex.target])

    def forward(values: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
        out = module.forward_queries(values, hidden, state)
        if not ex.categorical:
            return out.continuous[:, layout.continuous.index(ex.target_j), 0] * std
        logits = out.categorical[layout.categorical.index(ex.target_j)] / temperature
        logp = torch.log_softmax(logits, dim=-1)
        chosen = logp.gather(1, torch.as_tensor(classes, device=logp.device).view(-1, 1))[:, 0]
        if scale == "information":
            return chosen / np.log(2.0)
        if scale == "log_odds":
            return (chosen - torch.log1p(-chosen.exp().clamp(max=1 - _EPS))) / np.log(2.0)
        return chosen.exp()

    return forward
