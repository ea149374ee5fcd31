"""Command-line options the benches share, as argparse types: a comma-separated list of seeds, and
a comma-separated subset of named choices (an unknown name is the parser's error, naming the option
and the choices, before anything runs)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable


def seed_list(text: str) -> list[int]:
    """``"0,1,2"`` -> ``[0, 1, 2]``."""
    try:
        return [int(s) for s in text.split(",") if s]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def choice_list(choices: Iterable[str]) -> Callable[[str], list[str]]:
    """An argparse type: ``"a,b"`` -> ``["a", "b"]``, each one of ``choices``."""
    known = list(choices)

    def parse(text: str) -> list[str]:
        names = [s for s in text.split(",") if s]
        unknown = sorted(set(names) - set(known))
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown {', '.join(unknown)}; choices: {', '.join(known)}")
        return names

    return parse
