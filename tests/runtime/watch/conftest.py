"""The watch's tests, in one folder per wing (``worker/``, ``hang/``, ``slow/``, ``node/``) as in
``paijob/runtime/watch/``; the formats at the watch's root (its folder, the channel, the rank state, the seal,
the door) are tested here. Their shared helpers are in watch_helpers.py (this folder is on the path)."""
