"""Run config to the corpus library's config dataclasses.

Each stage's Dagster config takes its defaults from the corpus dataclass it configures and becomes
that dataclass through `to_dataclass`, so a setting has one default and one way in.

A closed choice is an enum (`choices`), which the Launchpad shows as a dropdown; the dataclasses
take its plain string value.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import dagster as dg
from pydantic import BaseModel, ConfigDict

T = TypeVar("T")

# The model_config of a Config class with enum fields: once validated, such a field holds its plain
# string value, defaults included, so the dataclasses, metadata, JSON records and config hashes see
# "classifier" and never QualityPolicy.classifier.
ENUM_FIELDS_AS_VALUES = ConfigDict(use_enum_values=True, validate_default=True)


def choices(name: str, values: Iterable[str]) -> type[enum.StrEnum]:
    """A string enum of `values`, each member named by its value: Dagster's config takes and shows
    member names, so a run config keeps the strings the corpus library knows."""
    return enum.StrEnum(name, [(value, value) for value in values])


# A torch device: auto takes CUDA when torch sees a GPU; cuda is the first GPU CUDA_VISIBLE_DEVICES leaves.
Device = choices("Device", ("auto", "cpu", "cuda"))


def to_dataclass(cls: type[T], config: BaseModel | Mapping[str, Any], exclude: Iterable[str] = ()) -> T:
    """`cls` made from the fields of `config` (a Dagster config or its `model_dump()`), minus those in
    `exclude` (the ones the asset uses itself). A mapping or Dagster config given for a dataclass-typed
    field becomes that dataclass, recursively; a list for a tuple-typed field becomes a tuple; fields
    not given keep `cls`'s defaults. A field `cls` does not have is refused with a `dg.Failure` naming
    it and the valid ones."""
    data = _fields_of(config)
    for name in exclude:
        data.pop(name, None)
    return _build(cls, data, cls.__name__)


def _fields_of(config: BaseModel | Mapping[str, Any]) -> dict[str, Any]:
    return config.model_dump() if isinstance(config, BaseModel) else dict(config)


def _build(cls: type[T], data: dict[str, Any], where: str) -> T:
    valid = {f.name for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(data) - valid)
    if unknown:
        raise dg.Failure(description=f"{where}: unknown config field(s) {unknown}; valid fields: {sorted(valid)}")
    hints = typing.get_type_hints(cls)
    return cls(**{name: _value(hints[name], value, f"{where}.{name}") for name, value in data.items()})


def _value(hint: Any, value: Any, where: str) -> Any:
    value = _plain(value)
    nested = _dataclass_in(hint)
    if nested is not None and isinstance(value, (BaseModel, Mapping)):
        return _build(nested, _fields_of(value), where)
    if isinstance(value, list) and _is_tuple(hint):
        return tuple(value)
    return value


def _plain(value: Any) -> Any:
    """Enum members, alone or in a list, as their values: the dataclasses take plain strings."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def _members(hint: Any) -> tuple:
    """The types a hint allows: the members of a union, else the hint itself."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _dataclass_in(hint: Any) -> type | None:
    return next((t for t in _members(hint) if isinstance(t, type) and dataclasses.is_dataclass(t)), None)


def _is_tuple(hint: Any) -> bool:
    return any(t is tuple or typing.get_origin(t) is tuple for t in _members(hint))
