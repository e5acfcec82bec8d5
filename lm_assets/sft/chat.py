"""The chat format: markers that are one token each, a Jinja template for Hugging Face, and the ids
and loss mask of an example as that template gives them.

An example renders as

    <|system|>\\nYou answer briefly.<|end|>\\n<|user|>\\nWhat is 2 + 2?<|end|>\\n<|assistant|>\\n4<|end|>\\n

`CHAT_TEMPLATE` renders the same string in `tokenizer.apply_chat_template` (stored in the export's
`tokenizer_config.json`); with `add_generation_prompt` it ends with `<|assistant|>\\n`, where the
model writes its answer and then `<|end|>`. The markers are user-defined pieces of the fine-tuning
tokenizer (`chat_tokenizer`: the corpus tokenizer with the markers appended after its last id when
it lacks them), so they are always one token and text cannot forge them by spelling them out: a
message that contains a marker is refused.

`encode_example` tokenizes the whole rendered string at once, as `apply_chat_template` does, and
marks for the loss the tokens of each assistant message and the `<|end|>` after it: the model learns
to answer and to stop, never to write the user's turn.
"""

from __future__ import annotations

import json

import numpy as np

MARKERS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}
END = "<|end|>"
CHAT_PIECES = (*MARKERS.values(), END)
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def spells_marker(text: str) -> bool:
    """Whether `text` spells one of the chat markers, which the format keeps for itself."""
    return any(piece in text for piece in CHAT_PIECES)


def render(messages: list[dict], add_generation_prompt: bool = False) -> tuple[str, list[tuple[int, int]]]:
    """The rendered text and the character spans the loss scores (each assistant message and its END)."""
    parts, spans, at = [], [], 0
    for m in messages:
        if spells_marker(m["content"]):
            raise ValueError("a message contains a chat marker")
        head = MARKERS[m["role"]] + "\n"
        body = m["content"] + END
        if m["role"] == "assistant":
            spans.append((at + len(head), at + len(head) + len(body)))
        parts.append(head + body + "\n")
        at += len(parts[-1])
    text = "".join(parts)
    if add_generation_prompt:
        text += MARKERS["assistant"] + "\n"
    return text, spans


def encode_example(sp, messages: list[dict] | str) -> tuple[np.ndarray, np.ndarray]:
    """Token ids of the rendered example and a 0/1 mask, 1 on the tokens the loss scores."""
    if isinstance(messages, str):
        messages = json.loads(messages)
    text, spans = render(messages)
    proto = sp.encode(text, return_type="proto")
    # SentencePiece's offsets are in bytes of the text: turn the character spans into byte spans, in one
    # pass over the text (the spans are in order and do not overlap).
    byte_at, chars_done, bytes_done = {}, 0, 0
    for at in sorted({a for span in spans for a in span}):
        bytes_done += len(text[chars_done:at].encode("utf-8"))
        byte_at[at], chars_done = bytes_done, at
    starts = np.array([byte_at[a] for a, _ in spans], dtype=np.int64)
    ends = np.array([byte_at[b] for _, b in spans], dtype=np.int64)
    ids = np.array([p.id for p in proto.pieces], dtype=np.int64)
    begin = np.array([p.begin for p in proto.pieces], dtype=np.int64)
    end = np.array([p.end for p in proto.pieces], dtype=np.int64)
    # The span a piece could lie in is the last one starting at or before it.
    span = np.searchsorted(starts, begin, side="right") - 1
    inside = (span >= 0) & (end > begin)
    inside[inside] &= end[inside] <= ends[span[inside]]
    return ids, inside.astype(np.uint8)


def chat_tokenizer(model: bytes) -> tuple[bytes, list[str]]:
    """The fine-tuning tokenizer: `model` with the chat markers appended when it lacks them, and which."""
    from lm_assets.corpus.tokens.tokenizer import add_pieces

    extended, added, _ = add_pieces(model, CHAT_PIECES)
    return extended, added


__all__ = ["CHAT_PIECES", "CHAT_TEMPLATE", "END", "MARKERS", "chat_tokenizer", "encode_example", "render", "spells_marker"]
