"""One name per hyperparameter across models: keys renamed since a release (``_config.ALIASES``)
still work, with a FutureWarning naming the new key, wherever a setting is given; files and
checkpoints written before a rename load silently (``test_saved_models.py``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone

from semiparam import ConfigError, NPTConfig, SPINConfig, SPINImageClassifier, SPINRegressor, TableClassifier
from semiparam._config import ALIASES, OLD_VALUES, Renamed, legacy_keys
from semiparam.models.ipnp import CIPNPConfig
from semiparam.models.tnpd import TNPDConfig
from semiparam.training.config import TrainConfig

SAVED = Path(__file__).parent / "fixtures" / "saved_models"


def test_every_alias_names_a_field_of_each_config_that_had_the_old_key() -> None:
    # NPTrainConfig was merged into TrainConfig (TrainConfig.MERGED): its old keys are TrainConfig's
    configs = {c.__name__: c for c in (SPINConfig, TNPDConfig, TrainConfig)}
    configs["NPTrainConfig"] = TrainConfig
    assert TrainConfig.MERGED == ("NPTrainConfig",)
    for old, alias in ALIASES.items():
        new = (alias.new,) if isinstance(alias, Renamed) else alias.new
        for owner in alias.configs:
            fields = configs[owner].field_names()
            assert set(new) <= set(fields) and old not in fields, (owner, old, new)
    for (key, _), entry in OLD_VALUES.items():
        for owner in entry.configs:
            assert {key, *entry.values} <= set(configs[owner].field_names())
            configs[owner](**entry.values)  # what the old value says now is a valid config


@pytest.mark.parametrize(
    ("cls", "old", "new"),
    [
        (SPINConfig, "n_layers", "n_blocks"),
        (SPINConfig, "n_inducing_points", "n_inducing"),
        (TNPDConfig, "n_layers", "n_blocks"),
        (TrainConfig, "checkpoint_every", "checkpoint_every_steps"),  # NPTrainConfig's
    ],
)
def test_old_keys_work_everywhere_a_config_is_built(cls: type, old: str, new: str) -> None:
    with pytest.warns(FutureWarning, match=f"{old!r} is deprecated; it is now {new!r}"):
        assert getattr(cls.from_dict({old: 3}), new) == 3
    with pytest.warns(FutureWarning, match=repr(new)):
        assert getattr(cls(**{old: 3}), new) == 3  # the constructor
    with pytest.warns(FutureWarning, match=repr(new)):
        assert getattr(cls().replace(**{old: 3}), new) == 3
    with pytest.warns(FutureWarning, match=repr(new)):
        assert getattr(cls(**{new: 3}), old) == 3  # reading the old attribute
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a file written before the rename: silently
        assert getattr(cls.from_dict({old: 3}, warn=False), new) == 3
    with pytest.raises(ConfigError, match=f"give only {new!r}"):
        cls.from_dict({old: 3, new: 3})


def test_an_alias_applies_only_to_the_configs_that_had_the_old_key() -> None:
    with pytest.raises(ConfigError, match="unknown NPTConfig key"):
        NPTConfig.from_dict({"n_layers": 2})  # NPT always said n_blocks
    with pytest.raises(ConfigError, match="unknown CIPNPConfig key"):
        CIPNPConfig.from_dict({"n_inducing_points": 4})  # the NPs always said n_inducing
    with pytest.raises(ConfigError, match="unknown TrainConfig key"):
        TrainConfig.from_dict({"n_layers": 4})
    with pytest.raises(ConfigError, match="unknown SPINConfig key"):
        SPINConfig.from_dict({"checkpoint_every": 4})
    with pytest.raises(AttributeError, match="n_layers"):
        NPTConfig().n_layers  # noqa: B018


@pytest.mark.parametrize(
    ("old", "now"),
    [
        ({"clip_norm": 0.5}, {"clip_mode": "norm", "clip_value": 0.5}),
        ({"clip_norm": None}, {"clip_mode": "none"}),
        ({"lr_schedule": "cosine"}, {"lr_schedule": "flat_cosine", "flat_fraction": 0.0}),
    ],
)
def test_an_old_value_is_said_by_the_settings_of_now(old: dict, now: dict) -> None:
    """The neural processes' settings that TrainConfig says another way (a value-changing
    alias): the old spelling gives the same config, with a FutureWarning that says the new one;
    an old file loads silently; the old spelling beside a contradicting new one raises."""
    with pytest.warns(FutureWarning, match="is now " + ", ".join(f"{k}={v!r}" for k, v in now.items())):
        assert TrainConfig(**old) == TrainConfig(**now)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        base = TrainConfig.neural_process()
        assert TrainConfig.from_dict(old, base=base, warn=False) == base.replace(**now)
    key = next(iter(old))
    clash = {k: v for k, v in {"clip_mode": "value", "flat_fraction": 0.5}.items() if k in now and k != key}
    with pytest.raises(ConfigError, match="give only|contradicts"):
        TrainConfig.from_dict({**old, **clash})


def test_reading_clip_norm_from_a_config_of_now() -> None:
    with pytest.warns(FutureWarning, match="'clip_mode' and 'clip_value'"):
        assert TrainConfig(clip_mode="norm", clip_value=2.0).clip_norm == 2.0
    with pytest.warns(FutureWarning):
        assert TrainConfig(clip_mode="none").clip_norm is None
    with pytest.warns(FutureWarning), pytest.raises(AttributeError, match="read clip_value"):
        TrainConfig(clip_mode="value").clip_norm  # noqa: B018


def test_table_fingerprints_leave_out_the_neural_process_settings_at_their_defaults() -> None:
    """Table-model checkpoints made before the merge still resume: the settings TrainConfig took
    in from the neural processes enter a table fit's fingerprint only when set away from their
    defaults (as do ``lookup_every`` and ``twin_noise``, added later), and TrainConfig's own keys
    keep their names there (an alias of a merged config is not a rename of TrainConfig's)."""
    later = set(TrainConfig.LATER_FIELDS)
    assert later == {
        "objective", "n_z_samples", "log_every", "lr_drops", "drop_factor", "lookup_every", "twin_noise",
        "twin_min_steps",
    }  # fmt: skip
    for config in (TrainConfig(), TrainConfig.cpu(), TrainConfig.spin_cpu()):
        moved = {n for n in ("twin_noise", "twin_min_steps") if getattr(config, n)}
        left_out = later - moved
        after_training = {"min_temperature", "ensemble_selection"}
        assert set(config.to_dict()) - set(config.fingerprint_dict()) == left_out | after_training
        assert "checkpoint_every_steps" in config.fingerprint_dict()
    # NPT's preset moves its twins' labels: its fits are not those of the checkpoints made before
    assert TrainConfig.cpu().fingerprint_dict()["twin_noise"] == 0.5
    assert TrainConfig(n_z_samples=2).fingerprint_dict()["n_z_samples"] == 2
    assert TrainConfig(lookup_every=5).fingerprint_dict()["lookup_every"] == 5
    # calibration and the ensemble's selection act after training: a checkpoint resumes whatever they are
    assert TrainConfig(min_temperature=0.7).fingerprint_dict() == TrainConfig().fingerprint_dict()
    assert TrainConfig(ensemble_selection=5).fingerprint_dict() == TrainConfig().fingerprint_dict()


def test_settings_of_one_kind_of_model_are_refused_for_the_other() -> None:
    TrainConfig.cpu().check_for("table")
    TrainConfig.neural_process().check_for("neural_process")
    TrainConfig().check_for("neural_process")  # the dataclass defaults move nothing of the tables'
    with pytest.raises(ConfigError, match="n_z_samples=4: no effect on a table model"):
        TrainConfig(n_z_samples=4).check_for("table")
    with pytest.raises(ConfigError, match="label_smoothing=0.1.*no effect on a neural process"):
        TrainConfig.cpu().check_for("neural_process")


def test_train_config_groups_its_settings_by_concern() -> None:
    from semiparam.training import config as cfg

    groups = [
        cfg.ScheduleSettings,
        cfg.OptimizerSettings,
        cfg.BatchSettings,
        cfg.MaskingSettings,
        cfg.EncodingSettings,
        cfg.PredictionSettings,
        cfg.ExecutionSettings,
        cfg.CheckpointSettings,
        cfg.NeuralProcessSettings,
    ]
    names = [n for g in groups for n in g.field_names()]
    assert names == TrainConfig.field_names()  # each setting in exactly one group, flat in TrainConfig
    assert all(issubclass(TrainConfig, g) for g in groups)
    with pytest.raises(ConfigError, match="learning_rate must be > 0"):
        cfg.OptimizerSettings(learning_rate=0.0)  # a group validates its own settings


def test_fingerprints_spell_renamed_keys_as_before() -> None:
    """Checkpoint fingerprints hash the keys as first written, so a fit checkpointed before a
    rename resumes after it (``test_saved_models.py`` resumes such checkpoints)."""
    spin = SPINConfig(n_blocks=3, n_inducing=7).fingerprint_dict()
    assert spin["n_layers"] == 3 and spin["n_inducing_points"] == 7
    assert not {"n_blocks", "n_inducing"} & set(spin)
    # nothing of NPT's renamed; a field added later (n_bins) enters only away from its default,
    # so checkpoints made before it resume
    assert NPTConfig().fingerprint_dict() == {k: v for k, v in NPTConfig().to_dict().items() if k != "n_bins"}
    assert NPTConfig(n_bins=16).fingerprint_dict() == NPTConfig(n_bins=16).to_dict()
    assert SPINConfig(n_bins=8).fingerprint_dict()["n_bins"] == 8 and "n_bins" not in spin
    assert legacy_keys(TNPDConfig, {"n_blocks": 2, "d_model": 8}) == {"n_layers": 2, "d_model": 8}


def test_estimator_model_options_take_old_keys() -> None:
    with pytest.warns(FutureWarning, match="'n_blocks'"):
        config, _ = SPINRegressor(model_options={"n_layers": 3, "n_inducing": 5})._configs()
    assert (config.n_blocks, config.n_inducing) == (3, 5)
    auto = TableClassifier(model_options={"dropout": 0.2, "spin": {"n_inducing_points": 4}})
    with pytest.warns(FutureWarning, match="'n_inducing'"):
        spin, _ = auto._configs("spin")
    assert spin.n_inducing == 4 and spin.dropout == 0.2


def test_image_defaults_yield_to_an_old_key() -> None:
    """The image preset's own n_blocks must not override the user's n_layers."""
    clf = SPINImageClassifier(model_options={"n_layers": 1})
    clf.padded_shape_, clf.patch_size_ = (1, 8, 8), 4
    with pytest.warns(FutureWarning, match="'n_blocks'"):
        config, _ = clf._configs()
    assert config.n_blocks == 1
    clf.model_options = None
    assert clf._configs()[0].n_blocks == 2  # the image preset's


def test_a_loaded_estimator_holds_its_options_as_named_now() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg = SPINRegressor.load(SAVED / "spin_regressor" / "model", device="cpu")
        assert reg.model_options == {
            "d_embedding": 8,
            "n_heads": 2,
            "dropout": 0.0,
            "n_blocks": 1,
            "n_inducing": 4,
        }
        clone(reg)._configs()  # refitting it says nothing either
        auto = TableClassifier.load(SAVED / "table_classifier_auto" / "model", device="cpu")
        assert auto.model_options["spin"] == {"n_blocks": 1, "n_inducing": 3}


def test_genotype_run_fingerprint_is_the_same_for_either_spelling() -> None:
    from semiparam.genomics import GenotypeImputer

    old = GenotypeImputer("spin", model_options={"n_layers": 2})._fingerprint_params()
    new = GenotypeImputer("spin", model_options={"n_blocks": 2})._fingerprint_params()
    assert old == new and old["model_options"] == {"n_layers": 2}


def test_cli_set_takes_an_old_key(tmp_path: Path) -> None:
    from semiparam.cli.main import main

    rng = np.random.default_rng(0)
    table = pd.DataFrame({"a": rng.normal(size=30), "b": rng.normal(size=30)})
    table["y"] = table["a"] - table["b"]
    table.to_csv(tmp_path / "t.csv", index=False)
    sets = ["model.d_embedding=8", "model.n_heads=2", "model.n_layers=1", "model.n_inducing_points=3"]
    sets += ["train.max_steps=2", "train.min_steps=0"]
    args = ["fit", str(tmp_path / "t.csv"), "--target", "y", "--model", "spin", "--n-estimators", "1"]
    args += ["--out", str(tmp_path / "run"), "--quiet", *[x for s in sets for x in ("--set", s)]]
    with pytest.warns(FutureWarning) as record:
        assert main(args) == 0
    said = " ".join(str(w.message) for w in record)
    assert "it is now 'n_blocks'" in said and "it is now 'n_inducing'" in said
    model_config = json.loads((tmp_path / "run" / "config.json").read_text())["model_config"]
    assert (model_config["n_blocks"], model_config["n_inducing"]) == (1, 3)
    assert "n_layers" not in model_config
