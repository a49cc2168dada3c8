import os

import numpy as np
import pandas as pd
import pytest
import torch

# Tests are many small models: one thread each avoids oversubscribing the two CI cores.
torch.set_num_threads(1)
os.environ.setdefault("TQDM_DISABLE", "1")

TINY_MODEL = {"d_embedding": 8, "n_heads": 2, "n_blocks": 2, "dropout": 0.0}


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
