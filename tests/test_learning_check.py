"""A quality check of the out-of-the-box estimator on a small real table (default tier).

If a change to the defaults, the training loop or the model makes NPT learn worse, this fails:
scikit-learn's Wisconsin breast cancer table (569 rows, 30 features, shipped with scikit-learn),
the demo's seeded, stratified 80/20 split, ``NPTClassifier`` with ``random_state`` set and
``n_estimators=1``: one member of the out-of-the-box ensemble, with every other default as shipped.
The ensemble averages such members (its quality is reported by ``benchmarks/tabular_defaults.py``);
checking one member guards the same recipe at a third of the ensemble's fit time. The stated
quality: held-out accuracy of at least 0.93 and log loss of at most 0.30 (predicting the class
shares gives 0.66), from a fit that ends by itself, on a plateau, well before the step ceiling
(the demo prints the fit time).
"""

import time

from sklearn.datasets import load_breast_cancer
from sklearn.metrics import accuracy_score, log_loss
from sklearn.model_selection import train_test_split

from semiparam import NPTClassifier


def test_default_npt_learns_breast_cancer():
    X, y = load_breast_cancer(return_X_y=True, as_frame=True)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, stratify=y, random_state=0)
    start = time.perf_counter()
    model = NPTClassifier(random_state=0, n_estimators=1).fit(X_train, y_train)
    seconds = time.perf_counter() - start
    proba = model.predict_proba(X_test)
    history = model.history_
    facts = (history.stop_reason, history.n_steps, seconds)
    assert accuracy_score(y_test, proba.argmax(1)) >= 0.93, facts
    assert log_loss(y_test, proba) <= 0.30, facts
    assert history.stop_reason.startswith("plateau"), facts  # converged, not cut off
    # the fit time is reported by the demo and benchmarks/tabular_defaults.py, not asserted here
    # (a shared CI machine makes a timed assertion flaky); a plateau well before the ceiling is
    assert history.n_steps < model.learner_.train_config.max_steps // 2, facts
