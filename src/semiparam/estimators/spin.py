"""SPIN estimators: the Semi-Parametric Inducing Point Network behind scikit-learn's API."""

from __future__ import annotations

from .tabular import TableClassifier, TableRegressor, single_family

_SPIN_DOC = """
    After ``fit`` the whole training set is encoded, exactly and in chunks, into the model's h
    inducing points, and the training rows are dropped. ``predict`` reads only the encoding (its
    cost does not depend on the training-set size); ``save`` writes only the encoding (the saved
    model holds no training row and does not grow with them); ``set_context(X, y)`` re-encodes new
    labelled rows without retraining. On a regression table with twins (rows of the same
    features) of up to 50,000 rows the ``cpu`` preset's predictor also reads the context rows
    (``SPINConfig.predictor_rows="twins"``): the encoding then keeps one latent token per row (not
    its cells), so a prediction's cost and the saved model grow with the rows, and a prediction
    follows a twin's label in a changed context.

    The encoder reads training labels, so SPIN trains with ``p_target < 1``: the share of labels
    hidden and scored at each step, the others being visible context (with ``p_target = 1`` the
    encoding would carry no label information). The feature-loss weight starts at 0.5 and is
    cosine-annealed to 0.
"""

_PRESETS_DOC = """    preset : {"cpu", "small", "base", "spin16", "spin64"}
        ``cpu`` (default: e=16, h=f=10, 1 block, training until the validation loss
        stops improving as NPT's ``cpu`` preset, label mask 0.5), the paper's UCI
        settings for small (``small``) or large (``base``) tables, or its genomics SPIN-16 /
        SPIN-64 (chunk masking). Model fields (``n_inducing``, ``n_latent_attributes``,
        ``n_blocks``, ...) go in ``model_options``; see ``SPINConfig``.
"""


def _doc(title: str, base_doc: str | None) -> str:
    text = base_doc or ""
    start = text.find("    preset :")
    end = text.find("    max_steps,")
    if start >= 0 and end > start:  # swap NPT's preset description for SPIN's
        text = text[:start] + _PRESETS_DOC + text[end:]
    first, _, rest = text.partition("\n")
    return f"{title}\n{_SPIN_DOC}{rest}"


@single_family
class SPINClassifier(TableClassifier):
    __doc__ = _doc(
        "Semi-Parametric Inducing Point Network classifier (Rastogi et al. 2023).",
        TableClassifier._family_doc,
    )
    _model_name = "spin"


@single_family
class SPINRegressor(TableRegressor):
    __doc__ = _doc(
        "Semi-Parametric Inducing Point Network regressor (Rastogi et al. 2023).", TableRegressor._family_doc
    )
    _model_name = "spin"
