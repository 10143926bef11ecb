"""How paijob writes a duration for people, everywhere one is read (status, list, the closing line of a
job, the portal's ``formatDuration`` in ``local/portal/static/common.js``, which writes the same).

``0.4 s`` under 10 seconds (a short job's tenths matter), ``42 s`` under a minute, ``3 min 14 s`` under an
hour, ``2 h 5 min`` beyond. Pure; no clock is read here.
"""

from __future__ import annotations

import math

UNKNOWN = "-"


def human_duration(seconds: float | None) -> str:
    """``seconds`` as people read it (``-`` for none, a negative or a non-finite number)."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return UNKNOWN
    if seconds < 9.95:
        return f"{seconds:.1f} s"
    whole = int(seconds + 0.5)
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min {whole % 60} s"
    return f"{whole // 3600} h {whole % 3600 // 60} min"
