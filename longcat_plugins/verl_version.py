"""The verl releases this package was written and tested against, and the one check every seam
makes before it patches or wraps verl: outside the range verl is left as it is (with a warning
from the seam), since a private method we wrap may have changed there."""

from __future__ import annotations

#: the verl release range every seam, fix and wrapper was tested against
TESTED_VERL = ">=0.9.1,<0.10"


def installed_verl() -> str | None:
    """The installed verl's version; ``None`` where verl is not installed."""
    import importlib.metadata

    try:
        return importlib.metadata.version("verl")
    except importlib.metadata.PackageNotFoundError:
        return None


def verl_is_tested() -> bool:
    """Is the installed verl inside :data:`TESTED_VERL`?"""
    from packaging.specifiers import SpecifierSet

    version = installed_verl()
    return version is not None and version in SpecifierSet(TESTED_VERL)
