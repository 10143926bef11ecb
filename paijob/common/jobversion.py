"""The paijob version a job was rendered with, as the task sees it.

The templates export it in every task (``PAIJOB_RENDERED_VERSION``) and
install that exact version when the image lacks paijob-runtime; an image that
brings its own paijob may hold another one, and the job text and the runtime
then disagree on options. paijob-runtime reports both and warns on a mismatch.
Torch-free: the client (render) and the runtime both import it.
"""

from __future__ import annotations

from collections.abc import Mapping

from paijob import __version__
from paijob.common.contract import RENDERED_VERSION as RENDERED_VERSION_ENV


def rendered_version(environ: Mapping[str, str]) -> str | None:
    """The version of the paijob that rendered this task's job; None outside a rendered job."""
    return environ.get(RENDERED_VERSION_ENV) or None


def version_line(environ: Mapping[str, str]) -> str:
    """``paijob-runtime 0.1.0 (job rendered by paijob 0.1.0)``: both versions side by side."""
    rendered = rendered_version(environ)
    own = f"paijob-runtime {__version__}"
    return f"{own} (job rendered by paijob {rendered})" if rendered else own


def mismatch_warning(environ: Mapping[str, str]) -> str | None:
    """One line when the job was rendered by another paijob version than this runtime's; else None."""
    rendered = rendered_version(environ)
    if rendered is None or rendered == __version__:
        return None
    return (f"warning: this job was rendered by paijob {rendered} but the task runs paijob-runtime {__version__}; "
            f"install paijob=={rendered} in the image (or set runtimeInstall.enabled: true and drop it from the "
            f"image), or render the job with paijob {__version__}")
