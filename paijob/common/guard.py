"""The one error guard of paijob's two commands (``paijob`` and ``paijob-runtime``).

A user's error is one line and its own exit code (no traceback), Ctrl-C is
:data:`~paijob.common.exitcodes.INTERRUPTED`, and a reader that left the pipe
(``paijob list | head``) is not an error. Both programs go through
:func:`run_guarded`, so they cannot drift apart.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from paijob.errors import PaijobError


def run_guarded(program: str, command: Callable[[], int | None], *,
                shown: Callable[[str], str] = str) -> int:
    """Run ``command`` and return the process exit code; ``shown`` makes an error message fit to print."""
    try:
        code = int(command() or 0)
        sys.stdout.flush()  # a closed pipe surfaces here, not at interpreter exit
        return code
    except PaijobError as error:
        print(f"{program}: error: {shown(str(error))}", file=sys.stderr)
        return error.exit_code
    except KeyboardInterrupt:
        from paijob.common import exitcodes  # (and signal): only when it is needed

        print(f"{program}: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        # The reader left: point stdout at /dev/null so the interpreter's final flush stays quiet.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
