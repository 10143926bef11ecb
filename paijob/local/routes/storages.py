"""The local cluster's storage routes (``/api/v2/storages``), a blueprint under the API's (its token check holds).

As rest-server's ``controllers/v2/storage.js`` over ``models/v2/storage.js``: the list of the user's storages
(``?default=true``: the default ones), and one storage's detail: 404 ``NoStorageError`` for a storage the
cluster does not have, 403 ``ForbiddenUserError`` for one the user may not use."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, g, jsonify, request

from paijob.local import storage
from paijob.local.routes.shared import error


def blueprint() -> Blueprint:
    routes = Blueprint("storages", __name__)

    @routes.get("/storages")
    def storages() -> Response:
        return jsonify(storage.summary(default_only=request.args.get("default") == "true"))

    @routes.get("/storages/<name>")
    def one_storage(name: str) -> Response:
        if storage.forbidden(name):
            return error(403, "ForbiddenUserError", f"User {g.user} is not allowed to access {name}.")
        found = storage.detail(current_app.config["cluster"].state_dir, name)
        if found is None:
            return error(404, "NoStorageError", f"Storage {name} is not found.")
        return jsonify(found)

    return routes
