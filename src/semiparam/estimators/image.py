"""Image classifiers: NPT and SPIN over images whose patches are the attributes (NPT paper,
appendix B.8; :mod:`semiparam.nn.patches`).

An image of ``C x H x W`` pixels is a row of ``C * H * W`` pixel cells and its label. Pixels are
scaled (uint8 / 255) and standardised per channel with the training images' mean and standard
deviation; NaN pixels are missing cells (the mask channel says so). Images whose sides are not a
multiple of the patch size are padded at the bottom and right with the channel mean. Training is
the tables' masked reconstruction: a share of the pixels and of the labels is hidden and predicted
(squared error per pixel, cross-entropy per label), and a prediction reads the training images and
their labels through attention between datapoints (NPT) or through the inducing points (SPIN).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted

from .._config import ConfigError
from ..data.columns import CATEGORICAL, CONTINUOUS
from ..data.images import check_images, check_labels
from ..data.table import ColumnSpec, DataValidationError, EncodedTable, TableEncoder, TableSchema
from .base import TableEstimatorMixin, canonical_model_options
from .explain import ExplainMixin
from .tabular import TARGET, _common_init

__all__ = ["NPTImageClassifier", "SPINImageClassifier", "default_patch_size"]

# patches an image is cut into at most by default: MNIST's 28 x 28 gives the paper's 7 x 7 patches
# of 4 x 4 pixels, CIFAR-10's 32 x 32 its 8 x 8 of 4 x 4
MAX_DEFAULT_PATCHES = 64


def default_patch_size(height: int, width: int) -> int:
    """The smallest patch side that cuts a ``height x width`` image (padded up to multiples of
    it) into at most ``MAX_DEFAULT_PATCHES`` patches."""
    p = max(1, math.ceil(math.sqrt(height * width / MAX_DEFAULT_PATCHES)))
    while math.ceil(height / p) * math.ceil(width / p) > MAX_DEFAULT_PATCHES:
        p += 1
    return p


_PARAMS_DOC = """
    Parameters
    ----------
    preset : {"cpu", "small", "base"}
        Model and training preset. ``cpu`` (default) adds the image settings of
        ``_image_train_defaults`` (batches of 512 images, as the paper's MNIST run) to the table
        preset; ``small`` / ``base`` are the paper's.
    patch_size : int, optional
        Side of the square patches (pixels). None: the smallest that gives at most 64 patches
        (4 for 28 x 28 and 32 x 32 images, as the paper).
    encoder : {"linear", "cnn"}
        ``linear``: each patch's pixels and mask bits through one linear map (the paper);
        ``cnn``: a small convolutional stem whose output at stride ``patch_size`` gives the
        patch tokens.
    max_steps, batch_size, learning_rate, p_feature, p_target, validation_fraction, patience, time_budget :
        Override the preset's training settings (see ``TrainConfig``) when not None.
    n_estimators : int
        Ensemble members (each its own seed and validation split; probabilities averaged).
    model_options, train_options : dict, optional
        Further model config / ``TrainConfig`` fields; unknown keys raise.
    device, random_state, verbose, executor, ray_address :
        As for the table estimators (``NPTClassifier``).
    backend : optional
        Deprecated: the old name of ``executor`` (a FutureWarning at fit).
"""


class _ImageClassifier(ClassifierMixin, ExplainMixin, TableEstimatorMixin):
    # the cpu preset's training settings for images (arguments and train_options still win):
    # batches of 512 images and label masking of 0.15 as the paper's MNIST run, feature masking
    # 0.15 (the paper's); validation every 50 steps (a validation pass reads every training image),
    # at most 2,000 steps with the reconstruction weight annealed to 0 over the first 1,500 and a
    # final anneal of a quarter of the steps run (see TrainConfig.cpu for the adaptive schedule)
    _image_train_defaults: dict[str, Any] = {
        "batch_size": 512,
        "eval_every": 50,
        "min_steps": 500,
        "max_steps": 2000,
        "patience": 6,
        "anneal_fraction": 0.25,
        "tradeoff_steps": 1500,
        "p_target": 0.15,
        "p_feature": 0.15,
    }
    # model settings the cpu preset of an image model changes (model_options still win)
    _image_model_defaults: dict[str, Any] = {}

    def __init__(
        self,
        preset: str = "cpu",
        *,
        patch_size: int | None = None,
        encoder: str = "linear",
        max_steps: int | None = None,
        batch_size: int | None = None,
        learning_rate: float | None = None,
        p_feature: float | None = None,
        p_target: float | None = None,
        validation_fraction: float | None = None,
        patience: int | None = None,
        time_budget: float | None = None,
        # one model, as the papers (the table estimators' cpu presets train three; an image fit is
        # already minutes long)
        n_estimators: int = 1,
        model_options: dict[str, Any] | None = None,
        train_options: dict[str, Any] | None = None,
        device: str = "auto",
        random_state: Any = None,
        verbose: bool | None = None,
        executor: str = "serial",
        ray_address: str | None = None,
        backend: str | None = None,
    ) -> None:
        _common_init(self, **{k: v for k, v in locals().items() if k not in ("self", "__class__")})

    @property
    def _train_defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return dict(self._image_train_defaults) if self.preset == "cpu" else {}

    def _adjust_model_config(self, model_config: Any) -> Any:
        if self.encoder not in ("linear", "cnn"):
            raise ConfigError(f"encoder must be 'linear' or 'cnn', got {self.encoder!r}")
        given = set(canonical_model_options(self._model_name, self.model_options, warn=False) or {})
        changes = {}
        if self.preset == "cpu":
            changes = {k: v for k, v in self._image_model_defaults.items() if k not in given}
        c, h, w = self.padded_shape_
        return model_config.replace(
            **changes,
            image_channels=c,
            image_height=h,
            image_width=w,
            patch_size=self.patch_size_,
            image_encoder=self.encoder,
        )

    # -- images in ----------------------------------------------------------------------------
    def _set_geometry(self, shape: tuple[int, int, int]) -> None:
        c, h, w = shape
        p = self.patch_size
        if p is None:
            p = default_patch_size(h, w)
        elif isinstance(p, bool) or not isinstance(p, (int, np.integer)) or p < 1:
            raise ConfigError(f"patch_size must be a positive integer or None, got {p!r}")
        p = int(p)
        if p > max(h, w):
            raise ConfigError(f"patch_size {p} is larger than the images ({h} x {w})")
        self.image_shape_ = (c, h, w)
        self.patch_size_ = p
        self.padded_shape_ = (c, math.ceil(h / p) * p, math.ceil(w / p) * p)

    def _images(self, images: Any) -> np.ndarray:
        """Checked float images ``(n, C, H, W)`` of the shape seen at fit."""
        check_is_fitted(self, "learner_")
        x = check_images(images)
        if tuple(x.shape[1:]) != tuple(self.image_shape_):
            raise DataValidationError(
                f"the images have shape {tuple(x.shape[1:])} (C, H, W), but the model was fitted "
                f"on {tuple(self.image_shape_)}"
            )
        return x

    def _pixel_stats(self, x: np.ndarray) -> None:
        """Per-channel mean and standard deviation of the training pixels (NaN ignored)."""
        means, stds = [], []
        for k in range(x.shape[1]):
            channel = x[:, k]
            seen = channel[~np.isnan(channel)]
            if seen.size == 0:
                raise DataValidationError(f"channel {k} of the images has no observed pixel (all NaN)")
            means.append(float(seen.mean(dtype=np.float64)))
            std = float(seen.std(dtype=np.float64))
            stds.append(std if std > 0 else 1.0)
        self.channel_means_ = np.asarray(means)
        self.channel_stds_ = np.asarray(stds)

    def _encoder(self) -> TableEncoder:
        c, h, w = self.padded_shape_
        names = [f"c{k}_y{i}_x{j}" for k in range(c) for i in range(h) for j in range(w)]
        channel = np.repeat(np.arange(c), h * w)
        labels = tuple(v.item() if isinstance(v, np.generic) else v for v in self.classes_)
        specs = tuple(ColumnSpec(n, CONTINUOUS) for n in names) + (ColumnSpec(TARGET, CATEGORICAL, labels),)
        means = {n: float(self.channel_means_[k]) for n, k in zip(names, channel)}
        stds = {n: float(self.channel_stds_[k]) for n, k in zip(names, channel)}
        return TableEncoder(TableSchema(specs, (TARGET,)), means, stds)

    def _encode(self, x: np.ndarray, labels: np.ndarray | None) -> EncodedTable:
        """Rows of standardised, padded pixels and the label index (missing when None)."""
        n, c, h, w = x.shape
        z = (x - self.channel_means_.reshape(1, c, 1, 1).astype(np.float32)) / self.channel_stds_.reshape(
            1, c, 1, 1
        ).astype(np.float32)
        _, hp, wp = self.padded_shape_
        # NOTE[DIFF]: the paper's images divide by its patch size; others are padded here, bottom and
        # right, with the channel mean (0 once standardised), rather than refused or resized
        if (hp, wp) != (h, w):
            z = np.pad(z, ((0, 0), (0, 0), (0, hp - h), (0, wp - w)))
        pixels = z.reshape(n, -1)
        missing = np.zeros((n, pixels.shape[1] + 1), dtype=bool)
        missing[:, :-1] = np.isnan(pixels)
        values = np.zeros((n, pixels.shape[1] + 1), dtype=np.float32)
        values[:, :-1] = np.where(missing[:, :-1], 0.0, pixels)
        if labels is None:
            missing[:, -1] = True
        else:
            values[:, -1] = np.searchsorted(self.classes_, labels)
        return EncodedTable(values, missing)

    def _labels(self, labels: Any, n: int) -> np.ndarray:
        """Labels of context images: among ``classes_``."""
        y = check_labels(labels, n)
        unknown = sorted(set(np.unique(y).tolist()) - set(self.classes_.tolist()))
        if unknown:
            raise DataValidationError(
                f"labels {unknown} were not seen at fit; classes are {self.classes_.tolist()}"
            )
        return y

    # hooks of the explanations (ExplainMixin): queries and labelled context images, encoded
    def _encode_queries(self, images: Any) -> EncodedTable:
        return self._encode(self._images(images), None)

    def _encode_labelled(self, images: Any, labels: Any) -> EncodedTable:
        x = self._images(images)
        return self._encode(x, self._labels(labels, len(x)))

    # -- the estimator ------------------------------------------------------------------------
    def fit(
        self,
        images: Any,
        labels: Any,
        *,
        checkpoint_dir: str | Path | None = None,
        resume: bool = False,
    ) -> _ImageClassifier:
        """Fit on ``images`` ``(n, H, W)`` or ``(n, C, H, W)`` (uint8 0-255, or floats) and their
        class ``labels``. ``checkpoint_dir`` / ``resume``: as ``NPTClassifier.fit``."""
        encoder, table = self.encode_for_fit(images, labels)
        learner = self._new_learner()
        learner.fit_encoded(encoder, table, checkpoint_dir=checkpoint_dir, resume=resume)
        self.learner_ = learner
        return self

    def encode_for_fit(self, images: Any, labels: Any) -> tuple[TableEncoder, EncodedTable]:
        """The first half of :meth:`fit` (as ``TableLearner.encode_for_fit`` is for tables): check
        ``images`` and ``labels``, learn the classes, the image geometry (patch size, padding) and
        the per-channel pixel statistics, and return the encoder and the encoded table training
        reads, ``(n, n_padded_pixels + 1)``: each image's standardised, padded pixels and its label code.
        Nothing is trained, but the classes and image statistics are set as by a fit (a fitted
        estimator's are replaced: fit again after). With :meth:`resolved_configs` it is what a fit's
        model and training step are built from (to measure one step's cost without a fit, say)."""
        x = check_images(images)
        y = check_labels(labels, len(x))
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if len(self.classes_) < 2:
            raise DataValidationError(
                f"the training images all have the label {self.classes_[0]!r}; a classifier needs "
                "at least two classes"
            )
        self._set_geometry(tuple(x.shape[1:]))  # type: ignore[arg-type]
        self._pixel_stats(x)
        self.feature_columns_: list[str] = []  # pixels have no names; see image_shape_
        self.n_features_in_ = int(np.prod(x.shape[1:]))
        return self._encoder(), self._encode(x, y)

    def predict_proba(self, images: Any) -> np.ndarray:
        """Class probabilities ``(n, n_classes)``, columns in the order of ``classes_``."""
        queries = self._encode_queries(images)
        self.learner_.use_executor(self._executor(), self.ray_address)
        return self.learner_.predict_columns(queries, [TARGET])[TARGET]["proba"]

    def predict(self, images: Any) -> np.ndarray:
        return self.classes_[np.argmax(self.predict_proba(images), axis=1)]

    def set_context(self, images: Any, labels: Any) -> _ImageClassifier:
        """Predict from the labelled ``images`` from now on, without retraining."""
        check_is_fitted(self, "learner_")
        self.learner_.set_context(self._encode_labelled(images, labels))
        return self

    def _fitted_extra(self) -> dict[str, Any]:
        return {
            "classes": self.classes_.tolist(),
            "classes_dtype": self.classes_.dtype.str,
            "image_shape": list(self.image_shape_),
            "patch_size": self.patch_size_,
            "padded_shape": list(self.padded_shape_),
            "channel_means": self.channel_means_.tolist(),
            "channel_stds": self.channel_stds_.tolist(),
        }

    def _restore_extra(self, extra: dict[str, Any]) -> None:
        dtype = np.dtype(extra["classes_dtype"]) if extra["classes_dtype"][1] != "O" else object
        self.classes_ = np.asarray(extra["classes"], dtype=dtype)
        self.image_shape_ = tuple(extra["image_shape"])
        self.patch_size_ = int(extra["patch_size"])
        self.padded_shape_ = tuple(extra["padded_shape"])
        self.channel_means_ = np.asarray(extra["channel_means"])
        self.channel_stds_ = np.asarray(extra["channel_stds"])

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        return tags


class NPTImageClassifier(_ImageClassifier):
    __doc__ = (
        "Classify images with a Non-Parametric Transformer over image patches (NPT paper, B.8):\n"
        "attention between the patches of an image and between images.\n" + _PARAMS_DOC
    )
    _model_name = "npt"
    # e = 16 per patch as the paper's MNIST run (a row token of 50 x 16 = 800 channels); the table
    # preset's cap on the row width (128) would shrink e to 4. The paper's 4x feed-forwards: the
    # table preset's 2x, its two blocks and its one head within a row were measured on tables only
    _image_model_defaults = {"max_row_width": None, "ff_multiplier": 4, "n_blocks": 4, "column_heads": None}


class SPINImageClassifier(_ImageClassifier):
    __doc__ = (
        "Classify images with a Semi-Parametric Inducing Point Network over image patches:\n"
        "inducing points attend to the training images; predictions need only their encoding.\n" + _PARAMS_DOC
    )
    _model_name = "spin"
    # the table preset's row cap would shrink e to 4 on 50 patches; its 2x feed-forwards, one
    # head within a row and one block were measured on tables only
    _image_model_defaults = {"max_row_width": None, "ff_multiplier": 4, "column_heads": None, "n_blocks": 2}
