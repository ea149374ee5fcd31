"""The CLI's consoles and the one rule for printing foreign text through them.

Plugin names, exception messages, config values and paths come from users and plugin
authors; Rich would read ``[/x]`` or ``[thirdparty]`` in them as markup (crash or silently
drop text). Every piece of such text goes through :func:`esc` before it meets our markup.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from rich.progress import Progress, ProgressColumn

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False, soft_wrap=True)


def esc(text: object) -> str:
    """``text`` as a string Rich prints literally inside markup."""
    return escape(str(text))


def progress_bar(*columns: str | ProgressColumn, on: Console, after: Sequence[str | ProgressColumn] = ()) -> Progress:
    """The commands' progress bars, one look: the task's description and a bar, then ``columns``
    (a string is a text column), the time elapsed, then ``after``; printed on ``on``."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    def column(c: str | ProgressColumn) -> ProgressColumn:
        return TextColumn(c) if isinstance(c, str) else c

    middle, last = [column(c) for c in columns], [column(c) for c in after]
    return Progress(TextColumn("{task.description}"), BarColumn(), *middle, TimeElapsedColumn(), *last, console=on)
