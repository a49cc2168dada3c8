"""The one attention block family (``nn.attention``: :class:`MAB` and the inducing-point attention
built on it) computes what the models' parallel blocks computed before it replaced them (issue 50
item 5): weights saved by ``fixtures/make_attention_outputs.py`` from the earlier blocks load into
freshly built models (old parameter names included) and every output, in evaluation and in training
(dropout from a seeded generator, and the gradients), matches the saved one."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import Tensor, nn

FIXTURES = Path(__file__).parent / "fixtures"


def _maker() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "make_attention_outputs", FIXTURES / "make_attention_outputs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MAKER = _maker()
SAVED = torch.load(FIXTURES / "attention_outputs.pt")


def _load(model: nn.Module, state: dict[str, Tensor]) -> nn.Module:
    model.load_state_dict(state)  # strict: every old name must find its parameter
    return model


def _under_new_names(
    build: Callable[[], nn.Module], state: dict[str, Tensor], grads: dict[str, Tensor]
) -> dict[str, Tensor]:
    """The saved gradient summaries (keyed by the parameter names of the earlier blocks) keyed by
    today's names: each old weight is tagged with its index and loaded into a fresh model, so the
    old names go through the same renaming as a saved model's, and the tags are read back."""
    old_names = list(state)
    tagged = {
        key: torch.full(value.shape, float(i), dtype=value.dtype)
        for i, (key, value) in enumerate(state.items())
    }
    probe = build()
    probe.load_state_dict(tagged)
    renamed = {}
    for new_name, param in probe.named_parameters():
        old_name = old_names[int(param.flatten()[0].item())]
        if old_name in grads:
            renamed[new_name] = grads[old_name]
    assert len(renamed) == len(grads)
    return renamed


def _expected(build: Callable[[], nn.Module], saved: dict[str, Any]) -> dict[str, Tensor]:
    outputs = MAKER.unpack(saved["outputs"])
    grads = {k.removeprefix("grad."): v for k, v in outputs.items() if k.startswith("grad.")}
    expected = {k: v for k, v in outputs.items() if not k.startswith("grad.")}
    new_names = _under_new_names(build, MAKER.unpack(saved["state"]), grads)
    return expected | {f"grad.{k}": v for k, v in new_names.items()}


def _assert_outputs(got: dict[str, Tensor], expected: dict[str, Tensor]) -> None:
    assert set(got) == set(expected)
    for key, value in expected.items():
        atol = 1e-4 if key.startswith("grad.") else 1e-6
        torch.testing.assert_close(got[key].to(value.dtype), value, atol=atol, rtol=1e-5, msg=key)


CASES = [(name, "table") for name in MAKER.TABLE_MODELS] + [(name, "np") for name in MAKER.NP_MODELS]


@pytest.mark.parametrize(("name", "kind"), CASES)
def test_models_compute_what_they_computed(name: str, kind: str) -> None:
    build: Callable[[], nn.Module] = partial(MAKER.build_table if kind == "table" else MAKER.build_np, name)
    run = MAKER.table_outputs if kind == "table" else MAKER.np_outputs
    expected = _expected(build, SAVED[name])
    model = _load(build(), MAKER.unpack(SAVED[name]["state"]))
    _assert_outputs(run(name, model), expected)
