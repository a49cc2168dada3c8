"""A description of the machine and the version of the code that ran (:mod:`semiparam._provenance`)
beside the timing and memory probe of :mod:`semiparam._measure`, re-exported here for the benchmarks.
"""

from __future__ import annotations

from .._measure import Measurement, measure, peak_rss_mb
from .._provenance import (
    IMAGE_ONLY,
    PRESENTATION_ONLY,
    TABLE_MODELS,
    code_hash,
    import_closure,
    library_version,
    machine_info,
)

__all__ = [
    "Measurement",
    "IMAGE_ONLY",
    "PRESENTATION_ONLY",
    "TABLE_MODELS",
    "code_hash",
    "import_closure",
    "library_version",
    "machine_info",
    "measure",
    "peak_rss_mb",
]
