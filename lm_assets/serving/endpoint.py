"""An OpenAI-compatible endpoint on an exported checkpoint, through a maintained server, and the check that
it answers what was evaluated.

    with LocalEndpoint(hf_dir) as url:                   # `transformers serve` on loopback, continuous batching
        answers = served_answers(url, hf_dir, prompts, 16)  # four requests at once, greedy
    answers == our_answers(load_model(hf_dir), prompts, 16)

`transformers serve` renders each request with the export's chat template (tokenizer_config.json) and
generates greedily; our own generation renders the same turn with `EvalModel.chat_prompt`. Equal texts
mean the template, the tokenizer and the weights the server uses are those the evaluation used; a drift in
any of them shows as a different answer.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def serve_command(hf_dir: str | os.PathLike, host: str = "127.0.0.1", port: int = 8000,
                  continuous_batching: bool = True) -> list[str]:  # fmt: skip
    executable = Path(sys.executable).with_name("transformers")
    command = [str(executable), "serve", "--host", host, "--port", str(port)]
    if continuous_batching:
        command.append("--continuous-batching")
    return command + [str(Path(hf_dir).resolve())]


READY = re.compile(r"Uvicorn running on http://[^\s:]+:(\d+)")


def bound_port(output: str) -> int | None:
    """The port a server started with port 0 says it listens on, once it has said so."""
    found = READY.search(output)
    return int(found.group(1)) if found else None


class LocalEndpoint:
    """`transformers serve` on the export, on a loopback port the kernel gives it, for the length of a `with`
    block; its output goes to `log` (default: a temporary file, removed after).

    The server binds port 0 and the port is read from its own readiness line: a port chosen here and bound
    there could be taken in between by another server, whose answers would then be taken for this one's."""

    def __init__(self, hf_dir: str | os.PathLike, log: str | os.PathLike | None = None, start_timeout_s: float = 300.0):
        self.hf_dir, self.log, self.start_timeout_s = Path(hf_dir), log, start_timeout_s
        self.url: str | None = None
        self.process: subprocess.Popen | None = None

    def __enter__(self) -> str:
        self._temporary = None
        if self.log is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="lm-assets-serve-")
            self.log = Path(self._temporary.name) / "serve.log"
        self._out = open(self.log, "ab")  # closed in __exit__
        start = self._out.tell()
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.process = subprocess.Popen(serve_command(self.hf_dir, port=0), stdout=self._out, stderr=self._out, env=env,
                                        start_new_session=True)  # fmt: skip
        deadline = time.monotonic() + self.start_timeout_s  # a hang guard: start-up ends at the first answer
        while not self.healthy(start):
            if self.process.poll() is not None:
                self.__exit__(None, None, None)
                raise RuntimeError(f"transformers serve exited with {self.process.returncode} before it answered; "
                                   f"its output: {self.log}")  # fmt: skip
            if time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise TimeoutError(f"transformers serve did not answer within {self.start_timeout_s:g} s; its output: "
                                   f"{self.log}")  # fmt: skip
            time.sleep(0.2)
        return self.url

    def healthy(self, start: int = 0) -> bool:
        if self.url is None:
            with open(self.log, "rb") as f:
                f.seek(start)
                port = bound_port(f.read().decode(errors="replace"))
            if port is None:
                return False
            self.url = f"http://127.0.0.1:{port}"
        try:
            with urllib.request.urlopen(self.url + "/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self._out.close()
        if self._temporary is not None:
            self._temporary.cleanup()
            self.log = None


def answer(url: str, model: str, prompt: str, max_tokens: int, chat: bool) -> str:
    """The endpoint's greedy answer: to `prompt` as a user turn (chat), or continuing it (completions)."""
    body = {"model": model, "max_tokens": max_tokens, "temperature": 0.0, "stream": False}
    body |= {"messages": [{"role": "user", "content": prompt}]} if chat else {"prompt": prompt}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        choice = json.loads(response.read())["choices"][0]
    return choice["message"]["content"] if chat else choice["text"]


def served_answers(url: str, hf_dir: str | os.PathLike, prompts: Sequence[str], max_tokens: int, chat: bool = True,
                   at_once: int = 4) -> list[str]:  # fmt: skip
    """The endpoint's greedy answer to each prompt, `at_once` requests in flight."""
    model = str(Path(hf_dir).resolve())
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        return list(pool.map(lambda p: answer(url, model, p, max_tokens, chat), prompts))


def our_answers(em, prompts: Sequence[str], max_tokens: int) -> list[str]:
    """Our greedy answer to each prompt as a server gives it: a chat checkpoint's to the prompt as a user turn
    of its chat template, cut at the end of the turn; a base checkpoint's continuation, cut at EOS. The ids
    are spelled by the export's own tokenizer (tokenizer.json), as the server spells them: it writes a byte
    that forms no character as U+FFFD, where SentencePiece writes some as control characters."""
    from transformers import AutoTokenizer

    from lm_assets.evaluation.generation import generate

    spelling = AutoTokenizer.from_pretrained(em.path)
    out = []
    for prompt in prompts:
        ids = em.encode(em.chat_prompt(prompt) if em.chat_template else prompt)
        tokens = generate(em.model, [ids], max_tokens, eos_id=em.stop_id).tokens[0]
        if tokens and tokens[-1] in (em.stop_id, em.tokenizer.eos_id()):
            tokens = tokens[:-1]
        out.append(spelling.decode(tokens, skip_special_tokens=True))
    return out


__all__ = ["LocalEndpoint", "answer", "bound_port", "our_answers", "serve_command", "served_answers"]
