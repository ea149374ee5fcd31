"""The shipped recipes and config groups, as the package ``longcat_plugins._configs`` (Hydra:
``pkg://longcat_plugins._configs``; Hydra needs an ``__init__.py`` to call a package available)."""
