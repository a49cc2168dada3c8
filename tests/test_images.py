"""Images: patch geometry, the image readers, NPTImageClassifier and SPINImageClassifier."""

import gzip
import struct

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from semiparam import ConfigError, DataValidationError, NPTConfig, NPTImageClassifier, SPINImageClassifier
from semiparam.data.dataset_files import DatasetError, data_dir
from semiparam.data.images import (
    check_images,
    images_from_dataset,
    load_image_arrays,
    load_mnist,
    read_idx,
)
from semiparam.estimators.image import default_patch_size
from semiparam.models.npt import NPT
from semiparam.nn.columns import ColumnLayout
from semiparam.nn.patches import ImageGeometry

TINY = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2, "dropout": 0.0}
FAST = {"eval_every": 10, "min_steps": 0, "patience": 3, "tradeoff_steps": 10}


def bars(n, size=8, seed=0, dtype=np.uint8):
    """Two classes: a bright horizontal bar in the top half of the image ('top') or in the
    bottom half ('bottom'), on noise."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 60, size=(n, size, size)).astype(np.float64)
    labels = np.where(rng.random(n) < 0.5, "top", "bottom")
    half = size // 2
    for k in range(n):
        at = rng.integers(0, half) + (half if labels[k] == "bottom" else 0)
        images[k, at, :] = 255
    return images.astype(dtype), labels


@pytest.fixture(scope="module")
def fitted():
    X, y = bars(160)
    clf = NPTImageClassifier(
        patch_size=4, max_steps=60, model_options=TINY, train_options=FAST, random_state=0, verbose=False
    )
    return clf.fit(X, y), X, y


@settings(max_examples=25, deadline=None)
@given(
    c=st.integers(1, 3),
    rows=st.integers(1, 4),
    cols=st.integers(1, 4),
    p=st.integers(1, 4),
)
def test_patches_round_trip(c, rows, cols, p):
    g = ImageGeometry(c, rows * p, cols * p, p)
    pixels = torch.randn(2, g.n_pixels)
    patches = g.to_patches(pixels)
    assert patches.shape == (2, rows * cols, c * p * p)
    assert torch.equal(g.from_patches(patches), pixels)
    # patch (0, 0) of channel 0 is the top-left p x p block of the image
    image = pixels.reshape(2, c, rows * p, cols * p)
    assert torch.equal(patches[:, 0, : p * p], image[:, 0, :p, :p].reshape(2, -1))


def test_default_patch_size():
    assert default_patch_size(28, 28) == 4  # the paper's MNIST: 7 x 7 patches
    assert default_patch_size(32, 32) == 4  # CIFAR-10: 8 x 8
    assert default_patch_size(8, 8) == 1
    p = default_patch_size(30, 45)
    assert np.ceil(30 / p) * np.ceil(45 / p) <= 64


def test_image_npt_tokens_and_outputs():
    layout = ColumnLayout(("continuous",) * 48 + ("categorical",), (0,) * 48 + (3,))
    config = NPTConfig(**TINY, image_channels=3, image_height=4, image_width=4, patch_size=2)
    model = NPT(config, layout)
    assert config.n_tokens(layout) == 4 + 1
    values = torch.randn(5, 49)
    values[:, -1] = 1
    out = model(values, torch.zeros(5, 49, dtype=torch.bool))
    assert out.continuous.shape == (5, 48, 1) and out.categorical[0].shape == (5, 3)
    # a hidden pixel is read through its mask bit, not its value
    hidden = torch.zeros(5, 49, dtype=torch.bool)
    hidden[:, 0] = True
    model.eval()
    a = model(values, hidden).categorical[0]
    values[:, 0] = 100.0
    assert torch.allclose(a, model(values, hidden).categorical[0])


def test_image_config_errors():
    with pytest.raises(ConfigError, match="does not divide"):
        NPTConfig(image_channels=1, image_height=10, image_width=10, patch_size=4)
    with pytest.raises(ConfigError, match="need image_channels"):
        NPTConfig(patch_size=4)
    with pytest.raises(ConfigError, match="Gaussian"):
        NPTConfig(image_channels=1, image_height=4, image_width=4, patch_size=2, gaussian_head=True)


def test_classifier_learns_and_round_trips(fitted, tmp_path):
    clf, X, y = fitted
    X_test, y_test = bars(80, seed=1)
    proba = clf.predict_proba(X_test)
    assert proba.shape == (80, 2) and np.allclose(proba.sum(1), 1)
    assert list(clf.classes_) == ["bottom", "top"]
    assert (clf.predict(X_test) == y_test).mean() > 0.8
    assert clf.image_shape_ == (1, 8, 8) and clf.patch_size_ == 4
    path = clf.save(tmp_path / "m")
    loaded = NPTImageClassifier.load(path)
    np.testing.assert_array_equal(loaded.predict_proba(X_test), proba)
    assert loaded.image_shape_ == clf.image_shape_


def test_encode_for_fit_is_what_fit_trains_on():
    """The public first half of fit: the encoder and table a training step reads, and the model
    built from ``resolved_configs`` runs a step on it (what benchmarks/images.py measures)."""
    from semiparam.models.registry import get_model
    from semiparam.training.trainer import Batch, Trainer

    X, y = bars(40, size=6, seed=3)
    clf = NPTImageClassifier(patch_size=4, model_options=TINY, random_state=0, verbose=False)
    encoder, table = clf.encode_for_fit(X, y)
    assert list(clf.classes_) == ["bottom", "top"] and clf.padded_shape_ == (1, 8, 8)
    layout = encoder.schema.layout()
    assert table.values.shape == (40, layout.n_columns) == (40, 8 * 8 + 1)
    np.testing.assert_array_equal(table.values[:, -1], np.searchsorted(clf.classes_, y))
    assert not table.missing.any()
    model_config, train_config = clf.resolved_configs()
    target = torch.zeros(layout.n_columns, dtype=torch.bool)
    target[-1] = True
    trainer = Trainer(get_model("npt")[1](model_config, layout), layout, target, train_config)
    batch = Batch(
        torch.as_tensor(table.values), torch.as_tensor(table.missing), torch.ones(40, dtype=torch.bool)
    )
    trainer.train_step(batch, 0)
    with pytest.raises(DataValidationError, match="at least two classes"):
        clf.encode_for_fit(X, np.full(40, "top"))


def test_classifier_reads_float_channels_padding_and_missing_pixels():
    X, y = bars(120, size=6, seed=2)
    # (n, C, H, W) floats; 6 x 6 with patches of 4 is padded to 8 x 8
    X3 = np.repeat(X[:, None].astype(np.float32) / 255, 3, axis=1)
    X3[0, 0, 0, 0] = np.nan  # a missing pixel is a hidden cell, not an error
    clf = NPTImageClassifier(
        patch_size=4, max_steps=20, model_options=TINY, train_options=FAST, random_state=0, verbose=False
    ).fit(X3, y)
    assert clf.padded_shape_ == (3, 8, 8)
    assert clf.predict(X3[:5]).shape == (5,)
    with pytest.raises(DataValidationError, match="fitted on"):
        clf.predict(X[:5])  # one channel, the model was fitted on three


def test_spin_image_classifier_cnn_round_trip(tmp_path):
    X, y = bars(120, seed=3)
    clf = SPINImageClassifier(
        encoder="cnn",
        patch_size=4,
        max_steps=20,
        model_options={"d_embedding": 8, "n_heads": 2, "n_blocks": 1},
        train_options=FAST,
        random_state=0,
        verbose=False,
    ).fit(X, y)
    proba = clf.predict_proba(X[:10])
    loaded = SPINImageClassifier.load(clf.save(tmp_path / "s"))
    np.testing.assert_allclose(loaded.predict_proba(X[:10]), proba, atol=1e-12)
    with pytest.raises(ValueError, match="holds a SPINImageClassifier"):
        NPTImageClassifier.load(tmp_path / "s")


def test_explain_rows_names_training_images(fitted):
    clf, X, y = fitted
    rows = clf.explain_rows(X[:3], top_k=4)
    assert list(rows.columns) == ["row", "context_row", "rank", "score"]
    assert len(rows) == 12 and rows["context_row"].between(0, len(X) - 1).all()
    # the images a prediction attends to most are mostly of its own class
    same = (y[rows["context_row"].to_numpy()] == y[rows["row"].to_numpy()]).mean()
    assert same >= 0.5


def test_set_context_checks_labels(fitted):
    clf, X, y = fitted
    with pytest.raises(DataValidationError, match="not seen at fit"):
        clf.set_context(X[:4], ["top", "x", "bottom", "top"])


@pytest.mark.parametrize(
    ("images", "labels", "message"),
    [
        ([np.zeros((4, 4)), np.zeros((5, 5))], [0, 1], "different shapes"),
        (np.full((4, 4, 4), "a"), [0, 1, 0, 1], "dtype"),
        (np.zeros((4, 4, 4), dtype=complex), [0, 1, 0, 1], "dtype"),
        (np.zeros((4, 16)), [0, 1, 0, 1], "reshape it"),
        (np.zeros((4, 8, 8, 3)), [0, 1, 0, 1], "moveaxis"),
        (np.zeros((4, 4, 4)), [0, 1, 0], "4 images but 3 labels"),
        (np.zeros((4, 4, 4)), [1, 1, 1, 1], "at least two classes"),
        (np.full((4, 4, 4), np.inf), [0, 1, 0, 1], "inf"),
        (np.zeros((0, 4, 4)), [], "no images"),
        (np.zeros((4, 4, 4)), [0.0, 1.0, np.nan, 1.0], "missing"),
    ],
)
def test_bad_inputs_raise_clear_errors(images, labels, message):
    clf = NPTImageClassifier(max_steps=1, model_options=TINY, verbose=False)
    with pytest.raises((DataValidationError, ValueError), match=message):
        clf.fit(images, labels)


def test_bad_settings_raise():
    X, y = bars(20)
    with pytest.raises(ConfigError, match="patch_size"):
        NPTImageClassifier(patch_size=0, model_options=TINY).fit(X, y)
    with pytest.raises(ConfigError, match="larger than the images"):
        NPTImageClassifier(patch_size=9, model_options=TINY).fit(X, y)
    with pytest.raises(ConfigError, match="encoder"):
        NPTImageClassifier(encoder="resnet", model_options=TINY).fit(X, y)


def _write_idx(path, array):
    codes = {np.dtype(np.uint8): 0x08, np.dtype(">i4"): 0x0C, np.dtype(">f4"): 0x0D}
    data = struct.pack(">HBB", 0, codes[array.dtype], array.ndim)
    data += struct.pack(">" + "I" * array.ndim, *array.shape) + array.tobytes()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wb") as fh:
        fh.write(data)


def test_read_idx_and_load_mnist_from_a_users_directory(tmp_path):
    images = np.arange(3 * 28 * 28, dtype=np.uint8).reshape(3, 28, 28)
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", images)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", np.array([3, 1, 4], dtype=np.uint8))
    floats = np.linspace(0, 1, 6, dtype=">f4").reshape(2, 3)
    _write_idx(tmp_path / "f.idx", floats)
    np.testing.assert_array_equal(read_idx(tmp_path / "f.idx"), floats)
    X, y = load_mnist("train", tmp_path)
    np.testing.assert_array_equal(X, images)
    assert y.tolist() == [3, 1, 4]
    with pytest.raises(FileNotFoundError, match="t10k-images"):
        load_mnist("test", tmp_path)
    (tmp_path / "bad.idx").write_bytes(b"\x00\x00\x08\x01\x00\x00\x00\x05abc")
    with pytest.raises(DatasetError, match="declares shape"):
        read_idx(tmp_path / "bad.idx")


@pytest.mark.skipif(not (data_dir() / "mnist").is_dir(), reason="the project's MNIST copy is absent")
def test_load_shipped_mnist_test_set():
    X, y = load_mnist()
    assert X.shape == (10000, 28, 28) and X.dtype == np.uint8
    assert np.bincount(y).tolist()[:3] == [980, 1135, 1032]


def test_load_image_arrays(tmp_path):
    X = np.zeros((3, 5, 5), dtype=np.uint8)
    np.savez(tmp_path / "a.npz", x_train=X, y_train=np.array([0, 1, 2]))
    images, labels = load_image_arrays(tmp_path / "a.npz")
    assert images.shape == (3, 5, 5) and labels.tolist() == [0, 1, 2]
    np.save(tmp_path / "b.npy", X)
    assert load_image_arrays(tmp_path / "b.npy")[1] is None
    np.savez(tmp_path / "c.npz", pixels=X)
    with pytest.raises(DatasetError, match="name it"):
        load_image_arrays(tmp_path / "c.npz")


def test_images_from_map_style_datasets():
    pairs = [(torch.full((1, 4, 4), float(k)), torch.tensor(k % 2)) for k in range(5)]
    images, labels = images_from_dataset(pairs)
    assert images.shape == (5, 1, 4, 4) and labels.tolist() == [0, 1, 0, 1, 0]

    class Held:  # torchvision's MNIST / CIFAR10 keep their arrays; CIFAR's are (n, H, W, C)
        data = np.zeros((4, 6, 6, 3), dtype=np.uint8)
        targets = [0, 1, 2, 3]
        transform = None
        target_transform = None

    images, labels = images_from_dataset(Held())
    assert images.shape == (4, 3, 6, 6)
    assert check_images(images).dtype == np.float32
    with pytest.raises(DataValidationError, match="different shapes"):
        images_from_dataset([(np.zeros((4, 4)), 0), (np.zeros((5, 5)), 1)])


def test_torchvision_dataset_adapter(tmp_path):
    datasets = pytest.importorskip("torchvision.datasets")
    transforms = pytest.importorskip("torchvision.transforms")
    folder = tmp_path / "MNIST" / "raw"
    folder.mkdir(parents=True)
    X = np.random.default_rng(0).integers(0, 255, size=(6, 28, 28)).astype(np.uint8)
    for stem, array in (
        ("t10k-images-idx3-ubyte", X),
        ("t10k-labels-idx1-ubyte", np.arange(6, dtype=np.uint8)),
    ):
        _write_idx(folder / stem, array)
    dataset = datasets.MNIST(tmp_path, train=False, download=False, transform=transforms.ToTensor())
    images, labels = images_from_dataset(dataset)
    assert images.shape == (6, 1, 28, 28)
    np.testing.assert_allclose(images[:, 0] * 255, X, atol=1e-4)
    assert labels.tolist() == list(range(6))


@pytest.mark.parametrize(
    "options",
    [
        {"row_attention": "performer"},
        {"row_attention": "chunked", "attention_chunk": 16},
        {"checkpoint_blocks": True},
    ],
)
def test_attention_backends_and_checkpointing_serve_images(options):
    X, y = bars(60, seed=4)
    clf = NPTImageClassifier(
        patch_size=4, max_steps=3, model_options={**TINY, **options}, train_options=FAST, verbose=False
    ).fit(X, y)
    proba = clf.predict_proba(X[:4])
    assert proba.shape == (4, 2) and np.isfinite(proba).all()


def test_checkpoint_and_resume(tmp_path):
    X, y = bars(60, seed=5)
    options = dict(patch_size=4, max_steps=6, model_options=TINY, random_state=0, verbose=False)
    train = {**FAST, "checkpoint_every_steps": 2}
    whole = NPTImageClassifier(**options, train_options=train).fit(X, y, checkpoint_dir=tmp_path / "a")
    assert (tmp_path / "a").is_dir()
    with pytest.raises(FileExistsError):
        NPTImageClassifier(**options, train_options=train).fit(X, y, checkpoint_dir=tmp_path / "a")
    resumed = NPTImageClassifier(**options, train_options=train).fit(
        X, y, checkpoint_dir=tmp_path / "a", resume=True
    )
    np.testing.assert_allclose(resumed.predict_proba(X[:5]), whole.predict_proba(X[:5]), atol=1e-12)


@pytest.mark.parametrize("cls", [NPTImageClassifier, SPINImageClassifier])
def test_image_estimators_keep_the_papers_widths_and_depth(cls):
    """The table presets' cuts (row cap, 2x feed-forwards, one head within a row, NPT's 2 blocks,
    SPIN's one layer) were measured on tables only: an image model keeps the paper's."""
    X, y = bars(40, seed=4)
    clf = cls(patch_size=4, max_steps=1, train_options=FAST, random_state=0, verbose=False).fit(X, y)
    config = clf.learner_.model_config
    assert config.max_row_width is None and config.ff_multiplier == 4 and config.column_heads is None
    assert config.n_blocks == (4 if cls is NPTImageClassifier else 2)
