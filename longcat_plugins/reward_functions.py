"""Module verl loads by path for `reward_function` components: ``pkg://longcat_plugins.reward_functions``.

verl selects reward_functions by a (path, name) pair rather than a registry, so any attribute
name here resolves to the enabled reward component of that name.
"""

from longcat_plugins.host import module_lookup

__getattr__, __dir__ = module_lookup("reward", "reward_function")
