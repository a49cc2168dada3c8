"""Neural processes over whole context sets: inducing-point NPs (SPIN paper) and attentive baselines.

``semiparam.neural_processes`` is the front door of the meta-learning half of the library::

    from semiparam.neural_processes import GPTaskSampler, TaskCollection, CIPNP, IPNP, CANP, ANP, BANP, TNPD

    sampler = GPTaskSampler(kernel="rbf", min_ctx=64, max_ctx=128, random_state=0)
    model = CIPNP(random_state=0).fit(sampler, max_steps=2000)
    batch = sampler.sample(16)             # a TaskBatch: context_x, context_y, target_x, target_y, masks
    pred = model.predict(batch.context_x, batch.context_y, batch.target_x)    # torch in, torch out
    ll = model.log_likelihood(batch.context_x, batch.context_y, batch.target_x, batch.target_y)

    # your own tasks: many short series, as (x, y) pairs or a table with a task column
    model = CIPNP(random_state=0).fit([(t1, y1), (t2, y2), ...], max_steps=2000)
    model = CIPNP(random_state=0).fit(df, task_column="series", x_columns="t", y_columns="value")
    pred = model.predict(t_context, y_context, t_new)     # numpy in: pred.mean, pred.std numpy arrays
    ll = model.log_likelihood(t_context, y_context, t_new, y_new)    # a float (mean per target point)

Tasks: :class:`TaskBatch` is the public type of a batch of padded tasks (shapes and masks in its
docstring); a task source is anything with ``sample(batch_size) -> TaskBatch``:
:class:`GPTaskSampler` (functions drawn from a Gaussian process) or :class:`TaskCollection` (a
user's own tasks, each split at random into context and targets at every draw).

Training settings: :class:`TrainConfig`, the one training config of every model in the library;
:meth:`TrainConfig.neural_process` is the neural processes' preset (SPIN paper A.6), and ``fit``'s
keyword options override its fields (``model.fit(sampler, max_steps=2000, lr_schedule="adaptive")``).
``NPTrainConfig`` is its deprecated name (one release).

Models: :class:`CIPNP` (conditional, SPIN encoder), :class:`IPNP` (SPIN encoder + global latent,
ELBO), and the baselines :class:`CANP` and :class:`ANP` (Kim et al. 2019, self-attention over the
context), :class:`BANP` (Lee et al. 2020, CANP + residual-bootstrap contexts) and :class:`TNPD`
(Nguyen & Grover 2022, a masked transformer over context and target tokens). Each takes
``random_state`` and ``device`` and saves to safetensors + JSON.
"""

from ..data.gp import KERNELS, GPTaskSampler, gp_log_likelihood, kernel_matrix, load_eval_set
from ..data.task_collection import TaskCollection
from ..data.tasks import TaskBatch, load_task_batches, pad_sequences, save_task_batches
from ..estimators.neural_process import (
    ANP,
    BANP,
    CANP,
    CIPNP,
    IPNP,
    TNPD,
    NeuralProcessEstimator,
    NPPrediction,
    load_neural_process,
)
from ..models.anp import ANPConfig
from ..models.banp import BANPConfig
from ..models.canp import CANPConfig
from ..models.ipnp import CIPNPConfig, IPNPConfig
from ..models.tnpd import TNPDConfig
from ..training.config import TrainConfig
from ..training.np_loop import NPTrainConfig, NPTrainHistory

load = load_neural_process

__all__ = [
    "TaskCollection",
    "ANP",
    "ANPConfig",
    "BANP",
    "BANPConfig",
    "CANP",
    "CANPConfig",
    "CIPNP",
    "CIPNPConfig",
    "GPTaskSampler",
    "IPNP",
    "IPNPConfig",
    "KERNELS",
    "NPPrediction",
    "NPTrainConfig",
    "NPTrainHistory",
    "TrainConfig",
    "NeuralProcessEstimator",
    "TNPD",
    "TNPDConfig",
    "TaskBatch",
    "gp_log_likelihood",
    "kernel_matrix",
    "load",
    "load_eval_set",
    "load_neural_process",
    "load_task_batches",
    "pad_sequences",
    "save_task_batches",
]
