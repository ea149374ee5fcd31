"""The records that flow through the DORA scheduler: prompts in, requests out, samples back.

They are plain dataclasses so that a trainer integration (verl, the simulator, a test) can build
and read them without importing anything else, and so that :meth:`DoraController.state_dict`
can store them as plain Python values.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class PromptRef:
    """One prompt (task) the scheduler may draw.

    ``uid`` is unique across the source; ``domain`` selects the quota (S4); ``pass_rate`` is the
    historical pass rate used for the oversampling coefficient (D5), ``None`` when unknown. The
    scheduler never looks inside ``payload``: it is handed back on every :class:`Request`.
    """

    uid: str
    domain: str = "default"
    pass_rate: float | None = None
    payload: Any = None


@runtime_checkable
class PromptSource(Protocol):
    """An indexable prompt collection too large, or too lazy, to materialise as a list.

    ``ref(i)`` must be cheap and return the same :class:`PromptRef` for the same ``i`` every time
    (the controller calls it once per prompt at construction to learn uids and domains).
    """

    def __len__(self) -> int: ...

    def ref(self, index: int) -> PromptRef: ...


@dataclass(frozen=True)
class Request:
    """One trajectory to generate: sample ``index`` of group ``group_id`` for prompt ``uid``.

    The instance must generate the whole trajectory with policy ``version`` (no version mixing,
    S1). ``request_id`` changes when the request is re-issued after an instance loss or an
    eviction, so a late result of the old attempt is recognised and ignored.
    """

    request_id: str
    uid: str
    prompt_index: int
    group_id: str
    index: int
    version: int
    domain: str
    instance: str
    issued_at: float
    attempt: int = 0

    def to_sample(
        self,
        reward: float | None,
        payload: Any = None,
        *,
        finished_at: float,
        instance: str | None = None,
    ) -> Sample:
        """The finished :class:`Sample` for this request (same ids and version)."""
        return Sample(
            uid=self.uid,
            group_id=self.group_id,
            version=self.version,
            domain=self.domain,
            instance=self.instance if instance is None else instance,
            reward=reward,
            payload=payload,
            generated_at=self.issued_at,
            finished_at=finished_at,
            index=self.index,
            request_id=self.request_id,
        )


@dataclass
class Sample:
    """A finished trajectory.

    ``version`` is the one policy version that generated it from first to last token.
    ``generated_at``/``finished_at`` are the caller's clock (any monotone unit). ``replayed`` is
    set by the scheduler when the sample comes back from the replay buffer (D2): such samples
    are older than the staleness bound on purpose.
    """

    uid: str
    group_id: str
    version: int
    domain: str
    instance: str
    reward: float | None
    payload: Any = None
    generated_at: float = 0.0
    finished_at: float = 0.0
    index: int = 0
    request_id: str = ""
    replayed: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Migration:
    """Move in-flight request ``request_id`` (and its KV cache) from ``source`` to ``target``.

    The version stays the same: every generation instance holds every live version (S1), so
    the target can continue the trajectory with the very weights that started it (inside verl,
    where a KV cache cannot travel, the target re-prefills the generated prefix).
    """

    request_id: str
    source: str
    target: str


@dataclass
class Group:
    """The ``n`` samples of one group (one prompt copy); all share one version."""

    group_id: str
    uid: str
    prompt_index: int
    domain: str
    version: int
    size: int
    samples: dict[int, Sample] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return len(self.samples) == self.size

    def ordered(self) -> list[Sample]:
        return [self.samples[i] for i in sorted(self.samples)]

    def __iter__(self) -> Iterator[Sample]:
        return iter(self.ordered())


def as_source(prompts: Sequence[PromptRef] | PromptSource) -> PromptSource:
    """Wrap a plain sequence of :class:`PromptRef` as a :class:`PromptSource`."""
    if isinstance(prompts, PromptSource):
        return prompts
    return _ListSource(list(prompts))


class _ListSource:
    def __init__(self, refs: list[PromptRef]) -> None:
        self._refs = refs

    def __len__(self) -> int:
        return len(self._refs)

    def ref(self, index: int) -> PromptRef:
        return self._refs[index]
