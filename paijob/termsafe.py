"""Text a job wrote, made safe to show on a terminal.

Logs, file names in an output folder and exit diagnostics come from the job,
which is untrusted code. Written raw to a terminal, its control sequences act
on the user's terminal: OSC 0 retitles the window, OSC 8 plants a link whose
text lies, OSC 52 writes the clipboard, CSI 2J clears the screen, cursor moves
and backspaces rewrite what was shown. So, on a terminal:

* ``line`` (a log line, a diagnostic) keeps colours (SGR, ``ESC [ ... m``),
  tabs and carriage returns (progress bars redraw with them), and shows every
  other control character, C1 controls included, as ``\\xNN``: what follows
  an escaped ESC is plain text;
* ``name`` (a file name) also shows ``\\r``, ``\\n`` and tabs that way, and
  the Unicode bidirectional overrides that reorder what is read
  (``\\u202e``), so a listed name is the name; ``message`` (an error that
  quotes such names) the same, its line breaks kept.

When the output is not a terminal (a file, a pipe) the text is written as the
job wrote it, and ``--raw`` asks for that on a terminal too: ``shown_line`` /
``shown_name`` pick for a stream.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TextIO

_SGR = r"\x1b\[[0-9;:]*m"
_LINE = re.compile(rf"({_SGR})|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_NAME = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_MESSAGE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


_SHORT = {"\r": "\\r", "\n": "\\n", "\t": "\\t"}


def _shown(char: str) -> str:
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def line(text: str) -> str:
    """A log line or message as it may reach a terminal: colours kept, other controls escaped."""
    return _LINE.sub(lambda match: match.group(1) or _shown(match.group(0)), text)


def name(text: str) -> str:
    """A file name as it may reach a terminal: every control and direction override escaped."""
    return _NAME.sub(lambda match: _shown(match.group(0)), text)


def message(text: str) -> str:
    """paijob's own message quoting names a job chose: as ``name``, but its lines stay lines."""
    return _MESSAGE.sub(lambda match: _shown(match.group(0)), text)


def is_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # closed
        return False


def _unchanged(text: str) -> str:
    return text


def shown_line(stream: TextIO, raw: bool = False) -> Callable[[str], str]:
    """``line`` when ``stream`` is a terminal and ``raw`` was not asked for, else the text unchanged."""
    return line if is_terminal(stream) and not raw else _unchanged


def shown_name(stream: TextIO, raw: bool = False) -> Callable[[str], str]:
    """``name`` when ``stream`` is a terminal and ``raw`` was not asked for, else the text unchanged."""
    return name if is_terminal(stream) and not raw else _unchanged
