"""Where the local cluster differs from a real OpenPAI, written down once: the ``Backend`` interface.

``paijob.api`` talks to    every cluster through OpenPAI's REST API (``paijob.remote.client``). What is left
differs by the kind of cluster, and is one method of :class:`Backend` (as TorchX's ``Scheduler`` is one
interface over Kubernetes, Slurm and the local scheduler), with one implementation each:
:class:`paijob.backends.local.LocalBackend` (the embedded cluster, through ``paijob.local.conveniences``
only) and :class:`paijob.backends.rest.RestBackend` (a real OpenPAI). ``api`` picks one with
:func:`backend_for` and never asks which it has.

========================  =================================================  =============================================
capability                local cluster                                      real OpenPAI
========================  =================================================  =============================================
``client``                started on demand (unless ``start`` is false)      the profile's address and token
``sends_token``           always (it reads its own token at submit)          when the profile has one
``pulls_images``          no: commands run in this Python environment        yes: a placeholder image is refused
``node_key_in_secrets``   no: it hands each job a node key itself            yes: added at submit, a new one each time
``snapshot_path``         the state dir keeps the workdir snapshot           None: it travels in the job text
``before_1_6``            None: its own setting decides                      its rest-server's version (``/info``)
``unknown_version``       what its own rule is                               that it was not asked, which rule applied
``storages``              known without the server (it may be down)          ``GET /api/v2/storages``; read-only ones
``stacks``                SIGUSR1 to the job's launchers                     refused, with how to do it over ssh
``output_root``           its state dir (or its storage's folder)            where this machine mounts the storage
``output_location``       that folder                                        the storage, folder, path in the tasks
``stored_job``            read from its store (its server may be down)      ``GET /jobs/{id}/config``
``job_state``             read from its store                                ``GET /jobs/{id}``
``missing_output``        why the folder is missing (``local prune``)       why it is missing (or the mount is not it)
========================  =================================================  =============================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from paijob.backends.base import Backend, StorageAccess

if TYPE_CHECKING:
    from paijob.remote.profiles import Cluster

__all__ = ["Backend", "StorageAccess", "backend_for"]


def backend_for(target: Cluster) -> Backend:
    """The backend of cluster ``target`` (a resolved profile)."""
    if target.is_local:
        from paijob.backends.local import LocalBackend

        return LocalBackend(target)
    from paijob.backends.rest import RestBackend

    return RestBackend(target)
