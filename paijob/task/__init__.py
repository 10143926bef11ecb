"""Torch-free pieces that both sides of paijob share: the laptop (``paijob``) and the task (``paijob-runtime``).

Everything here is standard library plus :mod:`paijob.errors` and :mod:`paijob.openpai`, so
the client can import it without the runtime and the runtime can ship it into task images
without the client: the launcher->worker contract and every ``PAIJOB_*`` name
(:mod:`~paijob.task.contract`), the runtime's option grammar that validate reads
(:mod:`~paijob.task.options`), ``/proc`` (:mod:`~paijob.task.procfs`), the one atomic write
(:mod:`~paijob.task.safefile`), child processes a ``paijob`` folder cannot shadow
(:mod:`~paijob.task.cwd_safe`) and ports for tasks' servers from outside the kernel's ephemeral
range (:mod:`~paijob.task.ports`).
"""
