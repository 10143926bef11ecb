"""A request's JSON body, read as strictly as every untrusted JSON paijob reads (the routes' and the portal's)."""

from __future__ import annotations

from typing import Any

from flask import request

from paijob.common import untrusted


def json_body() -> Any:
    """The request's JSON body, or None when it has none or one no reader takes: not JSON, not
    ``application/json``, nested deeper than 64 levels or holding too many values (``paijob.common.untrusted``).
    Flask's own ``get_json(silent=True)`` lets the ``RecursionError`` of a 50,000-deep body through: a 500 where
    rest-server's body parser answers 400 (issue 55)."""
    if not request.is_json:
        return None
    try:
        return untrusted.loads(request.get_data(cache=True))
    except ValueError:
        return None
