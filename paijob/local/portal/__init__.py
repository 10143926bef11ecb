"""The local cluster's web portal: job list, job page, log viewer and progress chart.

``sessions`` (no Flask) holds the one-time codes and browser sessions; ``web``
is the Flask blueprint that serves the static pages and logs a browser in.
The pages are plain HTML, CSS and JavaScript in ``static/`` (no build step, no
CDN) and read everything through the cluster's own REST API with the session
cookie. Only the server process imports ``web`` (and so Flask).
"""
