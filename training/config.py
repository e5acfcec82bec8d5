"""Typed configuration for the training program.

`ModelConfig` fixes the architecture (a Llama-style decoder, see `training/model.py`). Presets give
Llama-like shapes; `from_preset(name, vocab_size, **overrides)` builds one for a tokenizer's
vocabulary. `override(cfg, "a.b=c")` applies a command-line override to any (nested) config
dataclass, parsing the value as the field's declared type.

Parameter counts (`training.model.num_params`) with a 32,000-token vocabulary, untied embeddings,
and training FLOPs per token at seq_len 2048 (`training.model.flops_per_token`):

    preset  dim   layers heads kv  ffn    max_seq  params                          FLOPs/token
    tiny      64     2     4    2   176    128        4.19M (130,880 at vocab 300)   -
    125m     768    12    12    4  2048   2048      124.67M (75.5M without vocab)    0.83 G
    350m    1024    24    16    8  2816   2048      348.70M (283.2M without vocab)   2.50 G
    1b      2048    16    32    8  8192   2048     1104.22M (973.1M without vocab)   7.04 G

("without vocab": less the embedding and output matrices.)
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any


def swiglu_hidden(dim: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """Llama's SwiGLU width: 2/3 of 4*dim (same parameters as a 4*dim GELU MLP), rounded up to
    `multiple_of`, optionally scaled first by `ffn_dim_multiplier`."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


@dataclass
class ModelConfig:
    """Architecture of the decoder (see `training/model.py`).

    `n_kv_heads` < `n_heads` gives grouped-query attention (it must divide `n_heads`; `None` means
    `n_heads`, plain multi-head attention). `ffn_hidden` is the SwiGLU width; `None` derives it from
    `dim` and `multiple_of` with `swiglu_hidden`. `max_seq_len` sizes the precomputed RoPE table
    (and is exported as `max_position_embeddings`). `init_std` is the standard deviation of the
    normal initialization; the two residual output projections of each block use
    `init_std / sqrt(2 * n_layers)` (GPT-2's scaled residual init).
    """

    vocab_size: int = 32_000
    dim: int = 768
    n_layers: int = 12
    n_heads: int = 12
    n_kv_heads: int | None = None
    ffn_hidden: int | None = None
    multiple_of: int = 256
    max_seq_len: int = 2048
    rope_theta: float = 10_000.0
    norm_eps: float = 1e-5
    tie_embeddings: bool = False
    init_std: float = 0.02

    def __post_init__(self):
        if self.n_kv_heads is None:
            self.n_kv_heads = self.n_heads
        if self.ffn_hidden is None:
            self.ffn_hidden = swiglu_hidden(self.dim, self.multiple_of)
        for name in ("vocab_size", "dim", "n_layers", "n_heads", "n_kv_heads", "ffn_hidden", "max_seq_len"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.dim % self.n_heads:
            raise ValueError(f"dim {self.dim} is not a multiple of n_heads {self.n_heads}")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


PRESETS: dict[str, dict[str, Any]] = {
    # For CPU tests; grouped-query attention (2 query heads per kv head) is exercised.
    "tiny": dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=176, multiple_of=16, max_seq_len=128),
    "125m": dict(dim=768, n_layers=12, n_heads=12, n_kv_heads=4, ffn_hidden=2048, max_seq_len=2048),
    "350m": dict(dim=1024, n_layers=24, n_heads=16, n_kv_heads=8, ffn_hidden=2816, max_seq_len=2048),
    # Llama 3.2 1B's body (dim 2048, 16 layers, 32/8 heads, ffn 8192, theta 500k).
    "1b": dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, ffn_hidden=8192, max_seq_len=2048, rope_theta=500_000.0),
}


def from_preset(name: str, vocab_size: int, **overrides) -> ModelConfig:
    """The preset `name` for a vocabulary of `vocab_size`, with `overrides` replacing its fields.

    Overriding `dim` or `multiple_of` without `ffn_hidden` re-derives the SwiGLU width.
    """
    try:
        shape = dict(PRESETS[name])
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; choose from {sorted(PRESETS)}") from None
    if ("dim" in overrides or "multiple_of" in overrides) and "ffn_hidden" not in overrides:
        shape.pop("ffn_hidden", None)
    shape.update(overrides)
    return ModelConfig(vocab_size=vocab_size, **shape)


# ---------------------------------------------------------------------------------------------
# Command-line overrides
# ---------------------------------------------------------------------------------------------

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_NONE = {"none", "null"}


def _parse(text: str, tp: Any, where: str) -> Any:
    """`text` as a value of the annotated type `tp` (int, float, bool, str, Optional/Union, tuple/list)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if type(None) in args and text.strip().lower() in _NONE:
            return None
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _parse(text, arg, where)
            except (TypeError, ValueError) as err:
                errors.append(str(err))
        raise ValueError(f"{where}: cannot parse {text!r} as {tp}: {'; '.join(errors)}")
    if origin in (tuple, list):
        (item,) = {a for a in typing.get_args(tp) if a is not Ellipsis} or {str}
        items = [_parse(t.strip(), item, where) for t in text.split(",") if t.strip()]
        return origin(items)
    if tp is bool:
        low = text.strip().lower()
        if low in _TRUE:
            return True
        if low in _FALSE:
            return False
        raise ValueError(f"{where}: {text!r} is not a boolean")
    if tp is int:
        return int(text.replace("_", ""))
    if tp is float:
        return float(text.replace("_", ""))
    if tp is str or tp is Any:
        return text
    raise TypeError(f"{where}: cannot parse a value of type {tp} from the command line")


def override(cfg, assignment: str):
    """A copy of the dataclass `cfg` with one `"a.b=c"` assignment applied.

    The dotted path walks nested dataclass fields; the value is parsed as the field's declared
    type (`"none"` gives `None` for optional fields, commas separate tuple/list items). A field
    holding `None` whose type is a dataclass is filled with that dataclass's defaults first.
    Setting a `ModelConfig`'s `dim` or `multiple_of` re-derives `ffn_hidden` (as `from_preset`
    does); to set both, give `ffn_hidden` after `dim`.
    """
    key, sep, value = assignment.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"override {assignment!r} is not of the form key=value")
    return _set(cfg, key.strip().split("."), value.strip(), key.strip())


def apply_overrides(cfg, assignments):
    """`override` applied for each assignment in order."""
    for assignment in assignments:
        cfg = override(cfg, assignment)
    return cfg


def _set(obj, path: list[str], value: str, key: str):
    if not is_dataclass(obj) or isinstance(obj, type):
        raise TypeError(f"{key}: {type(obj).__name__} is not a config dataclass")
    names = {f.name: f for f in fields(obj)}
    name = path[0]
    if name not in names:
        raise KeyError(f"{key}: {type(obj).__name__} has no field {name!r}; fields: {sorted(names)}")
    tp = typing.get_type_hints(type(obj))[name]
    if len(path) == 1:
        new = _parse(value, tp, key)
    else:
        child = getattr(obj, name)
        if child is None:
            child = _dataclass_in(tp, key)()
        new = _set(child, path[1:], value, key)
    if name in ("dim", "multiple_of") and "ffn_hidden" in names and isinstance(obj, ModelConfig):
        # The derived SwiGLU width follows dim unless it is set explicitly later.
        return replace(obj, **{name: new, "ffn_hidden": None})
    return replace(obj, **{name: new})


def _dataclass_in(tp, key: str):
    for arg in typing.get_args(tp) or (tp,):
        if is_dataclass(arg):
            return arg
    raise TypeError(f"{key}: field is not a config dataclass")


def to_dict(cfg) -> dict:
    """A JSON-ready dict of a (nested) config dataclass."""
    return dataclasses.asdict(cfg)


__all__ = [
    "ModelConfig",
    "PRESETS",
    "apply_overrides",
    "from_preset",
    "override",
    "swiglu_hidden",
    "to_dict",
]
