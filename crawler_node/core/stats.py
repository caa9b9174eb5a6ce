"""Typed statistics: a snapshot is a frozen dataclass whose fields are its counters and gauges,
and a metric is declared beside the field it reads::

    @dataclass(frozen=True, slots=True)
    class FetchCounters:
        retries: int = field(metadata=counter("crawler_retries", "Failed attempts sent back ..."))

One declaration, two renderings: ``to_json`` makes the ``/v1/status`` JSON of a snapshot (the
field's name is its key), and api.metrics walks the same objects for ``/metrics`` (the declared
name, help, kind and labels). Adding a counter is one field; a typo in its name is a type error
where the snapshot is built (mypy), not a key that silently reads 0.

How a field is shown (``stat``, and its shorthands ``counter``, ``gauge``, ``histogram``, ``info``):
- ``metrics``: what it is in /metrics. A scalar is one sample; a mapping one sample per key, the
  key being the value of the one label nothing else fixes; a ``HistogramSnapshot`` (or a mapping
  of them) a histogram; a ``str`` under ``info`` the value of its label. ``None`` makes no sample
  (``none``: this value instead). A family that several fields make, one label value each, is a
  ``Metric`` constant those fields name, each with its label value in ``at``.
- ``at``: label values this field fixes, for its own metrics and for everything below it;
  ``is_label``: this field's value is the value of these labels for its siblings and below.
- ``json`` / ``key``: in /v1/status or not, and its key there when the field's name cannot be
  (``self``). ``flat``: a nested snapshot whose fields are shown as this object's own (a section
  that gathers several components' counters). ``when``: shown, in both renderings, only while
  that field of the same object is truthy (itself: a counter that shows once it has moved).
- ``scrape``: walked for /metrics or not (the busiest hosts of the moment are JSON only).
- ``zeros`` / ``zeros_from``: label values of a mapping that have a series from the start, at 0
  (constants, or the items of a field of the same object), so that ``rate()`` has one to read.

Pure: no I/O, and no prometheus_client (api.metrics renders).
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict, Unpack, cast

# What /v1/status is made of.
Json = None | bool | int | float | str | list["Json"] | dict[str, "Json"]

STAT = "crawler_node.stat"  # the key of a field's Stat in its dataclasses metadata


class Kind(enum.Enum):
    COUNTER = "counter"
    GAUGE = "gauge"
    HISTOGRAM = "histogram"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class Metric:
    """One metric family: its name (a counter's without ``_total``, an info's without
    ``_info``: prometheus_client adds them), help, kind and label names."""

    name: str
    help: str
    kind: Kind
    labels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Stat:
    """How one snapshot field is shown (see the module's docstring)."""

    metrics: tuple[Metric, ...] = ()
    at: tuple[tuple[str, str], ...] = ()
    is_label: tuple[str, ...] = ()
    json: bool = True
    key: str | None = None
    flat: bool = False
    when: str | None = None
    scrape: bool = True
    zeros: tuple[str, ...] = ()
    zeros_from: str | None = None
    none: float | None = None


PLAIN = Stat()  # a field without metadata: in the JSON under its name, walked for metrics


class StatOptions(TypedDict, total=False):
    at: Mapping[str, str]
    is_label: tuple[str, ...]
    json: bool
    key: str
    flat: bool
    when: str
    scrape: bool
    zeros: tuple[str, ...]
    zeros_from: str
    none: float


def stat(*metrics: Metric, at: Mapping[str, str] | None = None, is_label: tuple[str, ...] = (), json: bool = True,
         key: str | None = None, flat: bool = False, when: str | None = None, scrape: bool = True,
         zeros: tuple[str, ...] = (), zeros_from: str | None = None, none: float | None = None) -> Mapping[str, Stat]:
    """A field's metadata: ``field(metadata=stat(QUEUE_DEPTH, at={"stage": "parse"}))``."""
    return {STAT: Stat(metrics=metrics, at=tuple((at or {}).items()), is_label=is_label, json=json, key=key,
                       flat=flat, when=when, scrape=scrape, zeros=zeros, zeros_from=zeros_from, none=none)}


def counter(name: str, help: str, *, labels: tuple[str, ...] = (),
            **options: Unpack[StatOptions]) -> Mapping[str, Stat]:
    return stat(Metric(name, help, Kind.COUNTER, labels), **options)


def gauge(name: str, help: str, *, labels: tuple[str, ...] = (),
          **options: Unpack[StatOptions]) -> Mapping[str, Stat]:
    return stat(Metric(name, help, Kind.GAUGE, labels), **options)


def histogram(name: str, help: str, *, labels: tuple[str, ...] = (),
              **options: Unpack[StatOptions]) -> Mapping[str, Stat]:
    return stat(Metric(name, help, Kind.HISTOGRAM, labels), **options)


def info(name: str, help: str, *, labels: tuple[str, ...], **options: Unpack[StatOptions]) -> Mapping[str, Stat]:
    return stat(Metric(name, help, Kind.INFO, labels), **options)


# --- reading the declarations ------------------------------------------------------------------


_FIELDS: dict[type, tuple[tuple[str, Stat], ...]] = {}  # read once per class: the rendering walks them often


def fields_of(cls: type) -> tuple[tuple[str, Stat], ...]:
    """Each field of the snapshot class ``cls`` with how it is shown, in order."""
    found = _FIELDS.get(cls)
    if found is None:
        found = _FIELDS[cls] = tuple((f.name, f.metadata.get(STAT, PLAIN)) for f in dataclasses.fields(cls))
    return found


def shown(snapshot: object, how: Stat) -> bool:
    return how.when is None or bool(getattr(snapshot, how.when))


_ITEMS: dict[tuple[type, str], type | None] = {}


def item_class(cls: type, name: str) -> type | None:
    """The snapshot class of field ``name`` of ``cls``, or of its items (a sequence or mapping
    of snapshots, or an optional one): api.metrics declares the families of an empty list's
    items too. None for plain data."""
    key = (cls, name)
    if key not in _ITEMS:
        hint = typing.get_type_hints(cls)[name]
        _ITEMS[key] = next((candidate for candidate in (hint, *typing.get_args(hint))
                            if isinstance(candidate, type) and dataclasses.is_dataclass(candidate)), None)
    return _ITEMS[key]


def metrics_of(cls: type) -> Iterator[Metric]:
    """Every metric a snapshot class and those below it declare (scraped fields only)."""
    for name, how in fields_of(cls):
        if not how.scrape:
            continue
        yield from how.metrics
        below = item_class(cls, name)
        if below is not None:
            yield from metrics_of(below)


# --- the JSON of /v1/status --------------------------------------------------------------------


def to_json(snapshot: object) -> dict[str, Json]:
    """The snapshot as /v1/status shows it: each shown field under its name."""
    out: dict[str, Json] = {}
    _fill(snapshot, out)
    return out


_SCALARS = frozenset({str, int, float, bool, type(None)})  # JSON as they are (and most values are)
_PLANS: dict[type, tuple[tuple[str, str, bool, str | None], ...]] = {}


def _plan(cls: type) -> tuple[tuple[str, str, bool, str | None], ...]:
    """The fields of ``cls`` the JSON shows: (field, key, flat, when), worked out once."""
    plan = _PLANS.get(cls)
    if plan is None:
        plan = _PLANS[cls] = tuple((name, how.key or name, how.flat, how.when)
                                   for name, how in fields_of(cls) if how.json)
    return plan


def _fill(snapshot: object, out: dict[str, Json]) -> None:
    for name, key, flat, when in _plan(type(snapshot)):
        if when is not None and not getattr(snapshot, when):
            continue
        value = getattr(snapshot, name)
        if flat:
            _fill(value, out)
        else:
            out[key] = value if type(value) in _SCALARS else json_value(value)


def json_value(value: object) -> Json:
    kind = type(value)
    if kind in _SCALARS:
        return cast(Json, value)
    if kind is tuple or kind is list:  # most lists: a histogram's buckets, a snapshot's items
        items: Sequence[Any] = cast(Sequence[Any], value)
        return [item if type(item) in _SCALARS else json_value(item) for item in items]
    if isinstance(value, enum.Enum):
        return json_value(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(value)
    if isinstance(value, Mapping):
        return {str(key): item if type(item) in _SCALARS else json_value(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_value(item) for item in value]
    raise TypeError(f"no JSON for {type(value).__name__}: {value!r}")


class Indexed:
    """``snapshot["name"]``: the JSON of the field ``name``, of this snapshot or of the first
    below it that has one. Only for tests written against the dict snapshots these replaced;
    code reads the fields."""

    __slots__ = ()

    def __getitem__(self, name: str) -> Any:
        found = _find(self, name)
        if found is _MISSING:
            raise KeyError(name)
        return json_value(found)


_MISSING = object()


def _find(snapshot: object, name: str) -> object:
    names = fields_of(type(snapshot))
    for field_name, how in names:
        if (how.key or field_name) == name:
            return getattr(snapshot, field_name)
    for field_name, _ in names:
        value = getattr(snapshot, field_name)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            found = _find(value, name)
            if found is not _MISSING:
                return found
    return _MISSING
