import os

import numpy as np
import pandas as pd
import pytest
import torch

# Tests are many small models: one thread each avoids oversubscribing the two CI cores.
torch.set_num_threads(1)
os.environ.setdefault("TQDM_DISABLE", "1")

TINY_MODEL = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2, "dropout": 0.0}


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test starts on one PyTorch thread, whatever a test before it in this process set
    (a fit on more threads trains its ensemble members at once, in threads of its own)."""
    torch.set_num_threads(1)
    yield


@pytest.fixture(scope="session")
def ray_cluster():
    """One local Ray cluster per test process, started by the first test that needs it: the Ray
    tests (map_tasks, tuning, a benchmark's subprocess joining it by address) share it instead of
    each starting and stopping their own on the two CI cores."""
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def mixed_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    n = 60
    frame = pd.DataFrame(
        {
            "num": rng.normal(size=n),
            "cat": pd.Categorical(rng.choice(["a", "b", "c"], n)),
            "flag": rng.random(n) < 0.5,
            "count": rng.integers(0, 10, n),
        }
    )
    frame["target"] = np.where(frame["num"] + (frame["cat"] == "a") > 0.3, "yes", "no")
    return frame
