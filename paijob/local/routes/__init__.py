"""The local server's routes, one Flask blueprint per resource of OpenPAI's API (as rest-server's routers).

``jobs`` (jobs, attempts, config, executionType, tags, events), ``tasks`` (a task's
attempts and its log locations), ``users`` (login, the current user), ``cluster``
(``/info``, the virtual cluster, storages), all under the ``api`` blueprint that
checks the token; ``logs`` (the log manager's files, each URL with its own token).
``shared`` holds what they all use. :mod:`paijob.local.server` assembles the app.
"""
