"""What an LLM server says it can take: the ceiling of an adaptive gate (``GATE_PERMITS=auto``),
above which calls only queue on it (else ``GATE_MAX_PERMITS``); below it, ``gate_control``
rules. Which server says what: docs/howto/model-server.md, "How high auto climbs"."""

from __future__ import annotations

import math
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from studyqueue.services.llm import LLMClient
from studyqueue.services.replies import json_or_none

LLAMA_CPP = "llama.cpp"
VLLM = "vllm"
# The most slots the adaptive gate numbers for a server that states no maximum but says when
# it is full (vLLM): GPU servers keep gaining up to 50-64 requests in flight.
WAITING_CEILING = 64
# The most any server's own word raises a gate to (GATE_MAX_PERMITS' own bound).
HIGHEST = 256

_RUNNING, _WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
# A gauge above this is read as this (no server holds a million requests): ``1e300`` must not
# become a 300-digit int.
GAUGE_MAX = 1_000_000


@dataclass(frozen=True)
class Said:
    """What a server said of itself: its kind (``LLAMA_CPP``, ``VLLM`` or "": nothing)."""

    server: str = ""
    slots: int | None = None
    running: int | None = None
    waiting: int | None = None
    fault: str = ""  # why ``/metrics`` was unusable ("": it read, or there is none)

    def ceiling(self, max_permits: int) -> int:
        """The most calls the adaptive gate should try on this server."""
        if self.slots is not None:
            return max(1, min(self.slots, HIGHEST))
        if self.server == VLLM:
            return max(max_permits, WAITING_CEILING)
        return max_permits


async def ask(client: LLMClient) -> Said:
    """Ask the server at ``client``'s URL what it can take (never raises)."""
    for path in ("/props", "/slots"):
        slots = _slots(await client.server_page(path))
        if slots is not None:
            return Said(LLAMA_CPP, slots=slots)
    return await load(client)


async def load(client: LLMClient) -> Said:
    """vLLM's requests running and waiting now; ``Said()`` from any other server, with a
    ``fault`` when its page is there but unusable (the dashboard shows it)."""
    page = await client.server_page("/metrics")  # bounded: a larger page is no answer
    if page is None:
        return Said(fault="no answer, or over 256 KB")
    if page[0] != 200:  # 404, 501: no such page (mlx_lm.server, Ollama, llama.cpp's default)
        return Said(fault="" if page[0] in (404, 501) else f"HTTP {page[0]}")
    try:
        gauges, bad = _gauges(page[1].decode("utf-8", "replace"))
    except Exception as exc:
        # Whatever the parser raises on the server's text means "no usable gauges", never a
        # failed cycle (this runs in every cycle of an auto gate).
        return Said(fault=f"not Prometheus text ({type(exc).__name__})")
    fault = f"{bad[0]}: not a count" if bad else ""
    if _RUNNING not in gauges:
        return Said(fault=fault)
    return Said(VLLM, running=gauges[_RUNNING], waiting=gauges.get(_WAITING, 0), fault=fault)


def _slots(page: tuple[int, bytes] | None) -> int | None:
    """llama.cpp's slot count from ``/props`` (``total_slots``) or ``/slots`` (a list)."""
    if page is None or page[0] != 200:
        return None
    data = json_or_none(page[1])
    if isinstance(data, dict):
        total = data.get("total_slots")
        return total if type(total) is int and total > 0 else None
    if isinstance(data, list) and data and all(isinstance(slot, dict) for slot in data):
        return len(data)
    return None


def _gauges(text: str) -> tuple[dict[str, int], list[str]]:
    """The running and waiting gauges, summed over their labels (one per model), and the
    samples that are no count (``NaN``, ``+Inf``, ``1e400``, negative: skipped); a huge one
    is read as ``GAUGE_MAX``."""
    found: dict[str, int] = {}
    bad: list[str] = []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, value = sample.name, sample.value
            if name not in (_RUNNING, _WAITING):
                continue
            # int() of an infinite float raises OverflowError, of a NaN ValueError.
            if not (math.isfinite(value) and value >= 0):
                bad.append(f"{name} = {value}")
                continue
            found[name] = min(found.get(name, 0) + int(min(value, GAUGE_MAX)), GAUGE_MAX)
    return found, bad
