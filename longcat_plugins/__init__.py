"""longcat-plugins: the LongCat-Flash-Thinking RL system as verl plugins.

Public API: the ``hookimpl`` marker, the component descriptors (``components.__all__``: the
types, their ``COMPONENT_TYPES`` table, ``ComponentImportError``), the process-wide host, and
``settings_for`` (how a component reads its ``longcat.settings``). Importing this package
never imports verl.
"""

from longcat_plugins import import_hooks

# every module of this package reports when it has finished importing, so the verl bridge can
# finish a registration that found one of them half-made (see Bridge.on_plugin_module_imported)
import_hooks.watch_package("longcat_plugins")

from longcat_plugins import components  # noqa: E402 - imported after the watch above
from longcat_plugins.components import *  # noqa: E402, F403 - the descriptors are the public API (components.__all__)
from longcat_plugins.hookspecs import hookimpl  # noqa: E402
from longcat_plugins.host import Host, get_host, settings_for  # noqa: E402

__version__ = "0.1.0"

__all__ = ["__version__", "hookimpl", "get_host", "settings_for", "Host"]
__all__ += components.__all__  # Family, Component, every descriptor type, COMPONENT_TYPES, ComponentImportError
