"""scikit-learn's estimator checks on tiny settings."""

from sklearn.utils.estimator_checks import parametrize_with_checks

from semiparam import NPTClassifier, NPTRegressor, TableImputer

from .conftest import TINY_MODEL

# lr 1e-2 and no feature loss so that 60 steps reach the checks' training-accuracy bar (0.83)
TINY = dict(
    max_steps=60, learning_rate=1e-2, p_feature=0.0, model_options=TINY_MODEL, random_state=0, n_estimators=1
)


# a sample weight scales a row's loss; a repeated row is also one more context row that the
# attention reads, and the validation split, masks and minibatches are drawn per row, so a fit
# with weight 2 and one with the row twice differ (as for any stochastic network)
WEIGHTS_ARE_NOT_REPEATS = {
    "check_sample_weight_equivalence_on_dense_data": "a weight scales the loss; a repeat is also context"
}


@parametrize_with_checks(
    [
        NPTClassifier(**TINY),
        NPTRegressor(**TINY),
        TableImputer(max_steps=20, model_options=TINY_MODEL, random_state=0),
    ],
    expected_failed_checks=lambda est: {} if isinstance(est, TableImputer) else WEIGHTS_ARE_NOT_REPEATS,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
