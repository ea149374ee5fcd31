"""longcat_plugins.per_process: one build per key, however many threads ask at once."""

from __future__ import annotations

import threading
import time

from longcat_plugins.per_process import PerProcess


def test_concurrent_callers_get_one_object_built_once() -> None:
    cache: PerProcess[str, object] = PerProcess()
    builds: list[str] = []

    def build() -> object:
        builds.append("a")
        time.sleep(0.05)  # long enough for every other thread to arrive while it builds
        return object()

    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(cache.get("a", build))) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert builds == ["a"] and len(got) == 8 and all(g is got[0] for g in got)
    assert cache.get("b", lambda: "b") == "b" and sorted(cache.values) == ["a", "b"]
