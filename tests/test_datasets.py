"""The dataset registry: shapes and column kinds as the papers use them, official file formats,
clear errors for wrong files. Tests on the project's copies skip when ../shared/data is absent;
the official-format tests write small synthetic files of the official shape."""

from __future__ import annotations

import gzip
import struct
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from semiparam import datasets
from semiparam.data.loaders import BOSTON_COLUMNS, PROTEIN_COLUMNS, WDBC_FEATURES


def _have_data() -> bool:
    try:
        datasets.data_dir()
    except datasets.DatasetError:
        return False
    return True


needs_data = pytest.mark.skipif(not _have_data(), reason="shared data directory not available")


def test_registry_lists_the_papers_datasets() -> None:
    names = datasets.list_datasets()
    for name in (
        "boston",
        "concrete",
        "yacht",
        "protein",
        "breast_cancer",
        "adult",
        "kick",
        "poker",
        "covertype",
        "higgs",
        "higgs_lightgbm",
        "mnist_test",
    ):
        assert name in names
    info = datasets.dataset_info("covertype")
    assert info.is_subset and info.official_rows == 581_012
    assert datasets.dataset_info("Breast-Cancer").name == "breast_cancer"


def test_unknown_dataset_names_the_choices() -> None:
    with pytest.raises(datasets.DatasetError, match="unknown dataset 'bostn'.*boston"):
        datasets.load("bostn")


def test_bad_data_dir_env_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SEMIPARAM_DATA_DIR", str(tmp_path / "nowhere"))
    with pytest.raises(datasets.DatasetError, match="SEMIPARAM_DATA_DIR"):
        datasets.load("boston")
    monkeypatch.setenv("SEMIPARAM_DATA_DIR", str(tmp_path))
    with pytest.raises(datasets.DatasetError, match="not found in the data directory"):
        datasets.load("boston")


@needs_data
@pytest.mark.parametrize(
    "name, rows, features, n_categorical, target, task",
    [
        ("boston", 506, 13, 2, "MEDV", "regression"),
        ("concrete", 1030, 8, 0, "compressive_strength_mpa", "regression"),
        ("yacht", 308, 6, 5, "residuary_resistance", "regression"),
        ("protein", 45730, 9, 0, "RMSD", "regression"),
        ("breast_cancer", 569, 30, 0, "diagnosis", "binary"),
        ("adult", 48842, 14, 9, "income", "binary"),
        ("kick", 72983, 32, 18, "IsBadBuy", "binary"),
        ("poker", 25010, 10, 10, "CLASS", "multiclass"),
        ("covertype", 15000, 54, 44, "Cover_Type", "multiclass"),
        ("higgs", 10984, 28, 0, "label", "binary"),
        ("higgs_lightgbm", 7500, 28, 0, "label", "binary"),
    ],
)
def test_project_copies_load_with_the_papers_kinds(
    name: str, rows: int, features: int, n_categorical: int, target: str, task: str
) -> None:
    ds = datasets.load(name)
    assert ds.frame.shape == (rows, features + 1)
    assert ds.target == target and ds.frame.columns[-1] == target
    assert ds.task == task
    assert len(ds.categorical) == n_categorical
    for c in ds.categorical:  # categorical columns carry pandas' category dtype: estimators infer them
        assert isinstance(ds.frame[c].dtype, pd.CategoricalDtype)
    for c in ds.continuous:
        assert pd.api.types.is_numeric_dtype(ds.frame[c])


@needs_data
def test_dataset_specific_conventions() -> None:
    boston = datasets.load("boston")
    assert set(boston.categorical) == {"CHAS", "RAD"}
    assert len(boston.splits) == 20 and len(boston.splits["gal2016/0"].test) == 51
    adult = datasets.load("adult")
    assert adult.frame["workclass"].isna().sum() > 0  # '?' is missing
    assert set(adult.y.unique()) == {"<=50K", ">50K"}
    official = adult.splits["official"]
    assert (len(official.train), len(official.test)) == (32561, 16281)
    kick = datasets.load("kick")
    assert "RefId" not in kick.frame.columns
    assert kick.frame["PurchDate"].dtype == np.float64
    assert kick.frame["IsBadBuy"].sum() == 8976
    bc = datasets.load("breast_cancer")
    assert "id" not in bc.frame.columns and bc.y.value_counts().to_dict() == {"B": 357, "M": 212}


@needs_data
def test_mnist_test_set_is_read_from_idx() -> None:
    ds = datasets.load("mnist_test")
    assert ds.frame.shape == (10000, 785)
    assert ds.y.value_counts().sort_index().tolist()[:3] == [980, 1135, 1032]
    assert abs(float(ds.X.to_numpy().mean()) - 33.79) < 0.01


# -- user copies of the official files -------------------------------------------------------------


def _boston_like(n: int = 506) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(rng.random((n, 14)).round(4), columns=list(BOSTON_COLUMNS))
    frame["CHAS"] = rng.integers(0, 2, n)
    frame["RAD"] = rng.integers(1, 9, n)
    return frame


def test_official_boston_housing_data_is_read(tmp_path: Path) -> None:
    frame = _boston_like()
    path = tmp_path / "housing.data"  # UCI format: whitespace-separated, no header
    path.write_text("\n".join(" ".join(f"{v:>10}" for v in row) for row in frame.astype(object).to_numpy()))
    ds = datasets.load("boston", path=path)
    assert ds.frame.shape == (506, 14)
    np.testing.assert_allclose(ds.frame["MEDV"].to_numpy(), frame["MEDV"].to_numpy())
    assert list(ds.frame["RAD"].astype(int))[:5] == frame["RAD"].tolist()[:5]
    assert ds.splits == {}  # the Gal splits belong to the project's copy only
    assert datasets.load("boston", path=tmp_path).frame.shape == (506, 14)  # a directory works too


def test_wrong_row_count_says_what_was_expected(tmp_path: Path) -> None:
    path = tmp_path / "housing.data"
    _boston_like(500).to_csv(path, sep=" ", header=False, index=False)
    with pytest.raises(datasets.DatasetError, match=r"500 rows, expected 506"):
        datasets.load("boston", path=path)


def test_wrong_column_count_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "boston.csv"
    _boston_like().iloc[:, :12].to_csv(path, index=False)
    with pytest.raises(datasets.DatasetError, match="12 columns, expected 14"):
        datasets.load("boston", path=path)


def test_missing_path_and_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(datasets.DatasetError, match="does not exist"):
        datasets.load("yacht", path=tmp_path / "nope.data")
    with pytest.raises(datasets.DatasetError, match="found none of"):
        datasets.load("yacht", path=tmp_path)


def test_official_casp_csv_puts_rmsd_last(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    frame = pd.DataFrame(rng.random((45730, 10)), columns=["RMSD"] + list(PROTEIN_COLUMNS[:-1]))
    path = tmp_path / "CASP.csv"
    frame.to_csv(path, index=False)
    ds = datasets.load("protein", path=path)
    assert list(ds.frame.columns) == list(PROTEIN_COLUMNS)
    np.testing.assert_allclose(ds.y.to_numpy(), frame["RMSD"].to_numpy())


def test_official_wdbc_data_drops_the_id(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    rows = [
        ",".join([str(900000 + i), "M" if i % 3 == 0 else "B"] + [f"{v:.4f}" for v in rng.random(30)])
        for i in range(569)
    ]
    path = tmp_path / "wdbc.data"
    path.write_text("\n".join(rows) + "\n")
    ds = datasets.load("breast_cancer", path=tmp_path)
    assert ds.features == list(WDBC_FEATURES)
    assert ds.y.tolist()[:3] == ["M", "B", "B"]


def test_official_adult_pair_with_test_quirks(tmp_path: Path) -> None:
    line = (
        "39, State-gov, 77516, Bachelors, 13, Never-married, Adm-clerical, Not-in-family, White, Male, "
        "2174, 0, 40, {country}, {label}"
    )
    train = [
        line.format(country="?" if i == 0 else "United-States", label="<=50K" if i % 2 else ">50K")
        for i in range(32561)
    ]
    test = [line.format(country="Cuba", label="<=50K." if i % 2 else ">50K.") for i in range(16281)]
    (tmp_path / "adult.data").write_text(
        "\n".join(train) + "\n\n"
    )  # the official file ends with a blank line
    (tmp_path / "adult.test").write_text("|1x3 Cross validator\n" + "\n".join(test) + "\n")
    ds = datasets.load("adult", path=tmp_path)
    assert ds.frame.shape == (48842, 15)
    assert set(ds.y.unique()) == {"<=50K", ">50K"}  # trailing '.' of the test labels removed
    assert ds.frame["native_country"].isna().sum() == 1
    with pytest.raises(datasets.DatasetError, match="directory holding both parts"):
        datasets.load("adult", path=tmp_path / "adult.data")


def test_mnist_idx_header_is_checked(tmp_path: Path) -> None:
    images = tmp_path / "t10k-images-idx3-ubyte.gz"
    labels = tmp_path / "t10k-labels-idx1-ubyte.gz"
    with gzip.open(images, "wb") as fh:
        fh.write(struct.pack(">HBBI", 0, 0x08, 1, 3) + bytes(3))  # a labels header, not images
    with gzip.open(labels, "wb") as fh:
        fh.write(struct.pack(">HBBI", 0, 0x08, 1, 3) + bytes(3))
    with pytest.raises(datasets.DatasetError, match="3 dimension"):
        datasets.load("mnist_test", path=tmp_path)


def test_excel_is_refused_with_a_hint(tmp_path: Path) -> None:
    path = tmp_path / "Concrete_Data.xls"
    path.write_bytes(b"\xd0\xcf\x11\xe0")
    with pytest.raises(datasets.DatasetError, match="save the sheet as CSV"):
        datasets.load("concrete", path=path)
