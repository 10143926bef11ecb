"""The local cluster's storage routes (``/api/v2/storages``), a blueprint under the API's (its token check holds)."""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify, request

from paijob.local import storage


def blueprint() -> Blueprint:
    routes = Blueprint("storages", __name__)

    @routes.get("/storages")
    def storages() -> Response:
        return jsonify(storage.summary(default_only=request.args.get("default") == "true"))

    @routes.get("/storages/<name>")
    def one_storage(name: str) -> Response:
        found = storage.detail(current_app.config["cluster"].state_dir, name)
        if found is None:
            response = jsonify({"code": "NoStorageError", "message": f"Storage {name} is not found."})
            response.status_code = 404
            return response
        return jsonify(found)

    return routes
