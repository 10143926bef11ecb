"""The container side: ``paijob-runtime`` and what its workers import.

Importing this package must stay cheap: torch is imported only by the modules
that need it (launch, precision, recipes), never at package import.
"""
