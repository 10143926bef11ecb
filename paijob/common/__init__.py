"""Torch-free pieces that both sides of paijob share: the laptop (``paijob``) and the task (``paijob-runtime``).

Everything here is standard library plus :mod:`paijob.errors` and :mod:`paijob.openpai`, so
the client can import it without the runtime and the runtime can ship it into task images
without the client: the launcher->worker contract and every ``PAIJOB_*`` name
(:mod:`~paijob.common.contract`), the runtime's option grammar that validate reads
(:mod:`~paijob.common.options`), ``/proc`` (:mod:`~paijob.common.procfs`), the one atomic write
(:mod:`~paijob.common.safefile`), child processes a ``paijob`` folder cannot shadow
(:mod:`~paijob.common.cwd_safe`) and ports for tasks' servers from outside the kernel's ephemeral
range (:mod:`~paijob.common.ports`).
"""
