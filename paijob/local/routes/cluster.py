"""What the cluster is: ``/info`` and its one virtual cluster ``default`` (its storages: ``storages``)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from paijob import __version__
from paijob.local import listing, settings
from paijob.local.cluster import LocalCluster
from paijob.local.routes.shared import error
from paijob.local.views import vc_status


def blueprint(cluster: LocalCluster) -> Blueprint:
    api = Blueprint("cluster", __name__)

    # rest-server mounts /info with router.use: it answers every method the same (a POST is no 405 there)
    @api.route("/info", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
    def info() -> Response:
        # the swagger's launcherType is yarn or k8s: the local cluster answers like a k8s one
        # "version" is the OpenPAI release it behaves as: a client judges role names by it (settings)
        return jsonify({"name": f"paijob local cluster {__version__}", "version": settings.openpai_version(),
                        "launcherType": "k8s", "authnMethod": "basic", "virtualClusters": [listing.VIRTUAL_CLUSTER]})

    @api.get("/virtual-clusters")
    def virtual_clusters() -> Response:
        return jsonify({listing.VIRTUAL_CLUSTER: vc_status(cluster)})

    @api.get("/virtual-clusters/<name>")
    def virtual_cluster(name: str) -> Response:
        if name != listing.VIRTUAL_CLUSTER:
            return error(404, "NoVirtualClusterError", f"Virtual cluster {name} is not found.")
        return jsonify(vc_status(cluster))

    return api
