"""Drop-in ``apex.amp`` / ``apex.parallel`` on native torch for legacy scripts when real apex is absent."""
