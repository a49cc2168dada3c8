"""Wall time, CPU time and peak resident memory of a block of code (:func:`measure`), and the
peak resident memory of the process so far (:func:`peak_rss_mb`): the one memory probe of the
package, used by the benchmarks and by ``impute-vcf``'s summary.

Peak memory is the process's resident set size high-water mark (``VmHWM``) while the block runs.
On Linux the mark is reset before the block (``/proc/self/clear_refs``), so the number belongs to
that block alone; elsewhere a sampling thread (psutil, every 20 ms) stands in. Reported as the
absolute peak and as the peak above the resident size when the block started.
"""

from __future__ import annotations

import re
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_STATUS = Path("/proc/self/status")
_CLEAR = Path("/proc/self/clear_refs")


def _status_kb(field: str) -> int | None:
    try:
        match = re.search(rf"^{field}:\s+(\d+)\s+kB", _STATUS.read_text(), re.MULTILINE)
    except OSError:
        return None
    return int(match.group(1)) if match else None


def _rss_bytes() -> int:
    kb = _status_kb("VmRSS")
    if kb is not None:
        return kb * 1024
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        return 0


def _reset_peak() -> bool:
    try:
        _CLEAR.write_text("5")
    except OSError:
        return False
    return _status_kb("VmHWM") is not None


@dataclass
class Measurement:
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # CPU time of the process (all threads): less sensitive to other users
    peak_rss_mb: float = float("nan")
    start_rss_mb: float = float("nan")
    method: str = ""

    @property
    def peak_above_start_mb(self) -> float:
        return self.peak_rss_mb - self.start_rss_mb

    def to_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "cpu_seconds": self.cpu_seconds,
            "peak_rss_mb": self.peak_rss_mb,
            "peak_above_start_mb": self.peak_above_start_mb,
            "memory_method": self.method,
        }


@contextmanager
def measure() -> Iterator[Measurement]:
    """``with measure() as m: ...`` fills ``m.seconds`` and ``m.peak_rss_mb`` on exit."""
    m = Measurement()
    m.start_rss_mb = _rss_bytes() / 2**20
    sampler: threading.Thread | None = None
    stop = threading.Event()
    peak = [m.start_rss_mb]
    if _reset_peak():
        m.method = "VmHWM after clear_refs"
    else:
        m.method = "RSS sampled every 20 ms"

        def sample() -> None:
            while not stop.wait(0.02):
                peak[0] = max(peak[0], _rss_bytes() / 2**20)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
    start = time.perf_counter()
    cpu_start = time.process_time()
    try:
        yield m
    finally:
        m.seconds = time.perf_counter() - start
        m.cpu_seconds = time.process_time() - cpu_start
        if sampler is not None:
            stop.set()
            sampler.join()
            m.peak_rss_mb = max(peak[0], _rss_bytes() / 2**20)
        else:
            m.peak_rss_mb = (_status_kb("VmHWM") or 0) / 1024


def peak_rss_mb() -> float:
    """Peak resident memory of this process so far, in MiB: ``VmHWM`` on Linux, ``ru_maxrss`` on
    macOS, psutil's peak working set on Windows (no ``resource`` module there), else the current
    resident size, or 0 when nothing can tell."""
    kb = _status_kb("VmHWM")
    if kb is not None:
        return kb / 1024
    try:
        import resource
    except ImportError:
        try:
            import psutil
        except ImportError:
            return 0.0
        info = psutil.Process().memory_info()
        return float(getattr(info, "peak_wset", info.rss)) / 2**20
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024
