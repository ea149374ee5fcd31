"""Module verl loads by path for `sampler` components: ``pkg://longcat_plugins.samplers``.

verl selects samplers by a (path, name) pair rather than a registry, so any attribute
name here resolves to the enabled scheduler component of that name.
"""

from longcat_plugins.host import module_lookup

__getattr__, __dir__ = module_lookup("scheduler", "sampler")
