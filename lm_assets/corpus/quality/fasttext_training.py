"""fastText training in a child process whose glibc malloc hands out zeroed memory.

The fastText wheels built for numpy 2 leave 90 % of the input matrix uninitialized when thread=1
(fasttext-wheel's 0.9.2 build zeroes it); on reused heap memory that makes training non-deterministic
and often end in "Encountered NaN". `MALLOC_PERTURB_=255` makes glibc fill every new allocation with
0x00. It is set only in the child, so the caller's process and its allocator are left as they are.

Run as `python -m lm_assets.corpus.quality.fasttext_training TRAIN_TXT MODEL_BIN PARAMS_JSON`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ZEROED_MALLOC = {"MALLOC_PERTURB_": "255"}


def train_fasttext_model(lines: list[str], params: dict, quantize: bool, zeroed: bool = True) -> bytes:
    """The bytes of a supervised fastText model trained on `lines` (`__label__X text`) with
    `fasttext.train_supervised(**params)`, quantized when asked. `zeroed=False` leaves malloc as it is,
    to show what the zeroing prevents."""
    with tempfile.TemporaryDirectory() as tmp:
        train_path, model_path = Path(tmp, "train.txt"), Path(tmp, "model.bin")
        train_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        env |= ZEROED_MALLOC if zeroed else {}
        arguments = [str(train_path), str(model_path), json.dumps({**params, "quantize": quantize})]
        done = subprocess.run(
            [sys.executable, "-m", __name__, *arguments], env=env, capture_output=True, text=True, check=False
        )
        if done.returncode != 0 or not model_path.exists():
            raise RuntimeError(f"fastText training failed (exit {done.returncode}): {done.stderr.strip()[-1500:]}")
        return model_path.read_bytes()


def main(argv: list[str]) -> int:
    import fasttext

    train_path, model_path, params = argv[0], argv[1], json.loads(argv[2])
    quantize = params.pop("quantize")
    model = fasttext.train_supervised(input=train_path, **params)
    if quantize:
        model.quantize(input=train_path, retrain=False, qnorm=True, cutoff=0)
    model.save_model(model_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
