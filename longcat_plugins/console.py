"""The CLI's consoles and the one rule for printing foreign text through them.

Plugin names, exception messages, config values and paths come from users and plugin
authors; Rich would read ``[/x]`` or ``[thirdparty]`` in them as markup (crash or silently
drop text). Every piece of such text goes through :func:`esc` before it meets our markup.
"""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def esc(text: object) -> str:
    """``text`` as a string Rich prints literally inside markup."""
    return escape(str(text))
