"""``/authn/basic/login`` (the cluster's token is the one user's password) and ``/users/{name}``."""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from flask import Blueprint, Response, current_app, g, jsonify, request

from paijob.local import listing
from paijob.local.routes.body import json_body
from paijob.local.routes.shared import error


def blueprint() -> Blueprint:
    api = Blueprint("users", __name__)

    @api.post("/authn/basic/login")
    def login() -> Response:
        form = request.form if request.form else json_body()
        if not isinstance(form, Mapping):  # a list, a string, a body no reader takes: no username given
            form = {}
        username, password = form.get("username"), form.get("password")
        if not username or not password:
            return error(400, "InvalidParametersError", "username and password are required.")
        if username != current_app.config["user"]:
            return error(400, "NoUserError", f"User {username} is not found.")
        if not hmac.compare_digest(str(password).encode(), current_app.config["token"].encode()):
            return error(400, "IncorrectPasswordError",
                         "Password is incorrect (the local cluster's password is its token).")
        return jsonify({"token": current_app.config["token"], "user": username, "admin": True})

    @api.get("/users/<name>")
    def get_user(name: str) -> Response:
        if name != g.user:
            return error(404, "NoUserError", f"User {name} is not found.")
        return jsonify({"username": name, "grouplist": ["default", "admingroup"], "email": "",
                        "extension": {"virtualCluster": [listing.VIRTUAL_CLUSTER]}, "admin": True,
                        "virtualCluster": [listing.VIRTUAL_CLUSTER], "storageConfig": []})

    return api
