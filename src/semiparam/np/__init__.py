"""Deprecated: the old name of :mod:`semiparam.neural_processes`, kept for one release.

``semiparam.np`` shadowed the ``np`` every user has for numpy; importing it still works, with a
``DeprecationWarning``, and gives the same objects as the new name."""

import warnings

from ..neural_processes import *  # noqa: F403 - the whole public surface, under the old name
from ..neural_processes import __all__  # noqa: F401

warnings.warn(
    "semiparam.np is renamed semiparam.neural_processes; the old name will be removed in the next release",
    DeprecationWarning,
    stacklevel=2,
)
