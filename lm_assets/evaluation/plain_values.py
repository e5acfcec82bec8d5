"""Plain values as JSON, for the calls between a judge and the program it judges; standard library only.

    encode((1, [2.5, None], {"a": {3}}))  -> {"tuple": [1, {"list": [2.5, None]}, {"dict": [["a", {"set": [3]}]]}]}
    decode(json.loads(line))               -> the same value, built of Python's own types

None, bools, ints, floats (NaN and infinities too) and strings are JSON's own; lists, tuples, sets,
frozensets, dicts (any plain keys) and bytes are objects with one tag. `decode` builds nothing but those
types, so a value that crosses cannot carry code: no `__eq__` of the program's, no subclass. `encode`
takes the plain types' subclasses (a defaultdict, a namedtuple) as their base type, read through the
base type's own methods, as a comparison with `==` would see them; any other object is refused.
"""

TAGS = ("list", "tuple", "set", "frozenset", "dict", "bytes")
MAX_DEPTH = 100


class NotPlain(TypeError):
    """A value that is not plain data, or a message that does not decode to one."""


def encode(value, depth: int = 0):
    if depth > MAX_DEPTH:
        raise NotPlain(f"a value nested deeper than {MAX_DEPTH}")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, int):
        return int.__index__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).hex()}
    if isinstance(value, dict):
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]}
    for kind, tag in ((list, "list"), (tuple, "tuple"), (frozenset, "frozenset"), (set, "set")):
        if isinstance(value, kind):
            return {tag: [encode(item, depth + 1) for item in kind.__iter__(value)]}
    raise NotPlain(f"a value of type {type(value).__name__} is not plain data")


def decode(data, depth: int = 0):
    if depth > MAX_DEPTH:
        raise NotPlain(f"a value nested deeper than {MAX_DEPTH}")
    kind = type(data)
    if data is None or kind in (bool, int, float, str):
        return data
    if kind is not dict or len(data) != 1:
        raise NotPlain(f"not a plain value: {kind.__name__}")
    ((tag, items),) = data.items()
    if tag == "bytes" and type(items) is str:
        try:
            return bytes.fromhex(items)
        except ValueError as exc:
            raise NotPlain("bytes that are not hexadecimal") from exc
    if tag not in TAGS or type(items) is not list:
        raise NotPlain(f"not a plain value: tag {str(tag)[:20]!r}")
    try:
        if tag == "dict":
            if any(type(pair) is not list or len(pair) != 2 for pair in items):
                raise NotPlain("a dict item that is not a [key, value] pair")
            return {decode(k, depth + 1): decode(v, depth + 1) for k, v in items}
        values = [decode(item, depth + 1) for item in items]
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](values)
    except TypeError as exc:  # an unhashable key or member
        if isinstance(exc, NotPlain):
            raise
        raise NotPlain(f"an unhashable member of a {tag}") from exc


__all__ = ["MAX_DEPTH", "NotPlain", "decode", "encode"]
