"""The endpoint pool: the LLM servers one consumer calls, each with its own client, gate
(``services.gate``: shared by every consumer of the endpoint) and breaker. Where a call goes
and what a failure does: docs/howto/several-servers.md (``workers.registry.on_endpoint``)."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import statistics
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import DatabaseError

from studyqueue.services import gate_limits, server_limits
from studyqueue.services.endpoints import Endpoint
from studyqueue.services.gate import CircuitBreaker, LLMGate, RunDB
from studyqueue.services.llm import LLMClient, LLMError, LLMReply

# How much of an endpoint's recent work its tokens/s is measured over.
RATE_WINDOW_SECONDS = 600.0
# Empty replies in a row that open an endpoint's breaker (one may be the question's doing).
EMPTY_REPLIES_TO_PAUSE = 3


class State:
    """An endpoint as the pool sees it (its breaker)."""

    UP = "up"
    PROBING = "probing"  # its pause is over: one call at a time until one succeeds
    DOWN = "down"  # its breaker is open


logger = logging.getLogger("studyqueue.gate")

# GATE_PERMITS=auto: how often a consumer reads the endpoint's shared limit (and writes its
# measures) when its own gate did not move it.
GATE_SYNC_SECONDS = 2.0


@dataclass(eq=False)
class Member:
    """One endpoint of the pool and what the pool keeps of it."""

    endpoint: Endpoint
    client: LLMClient
    gate: LLMGate
    breaker: CircuitBreaker = field(default_factory=CircuitBreaker)
    committed: int = 0  # this pool's callers bound for its gate (waiting or holding a slot)
    server: str = ""  # what the server said it is (``server_limits``: llama.cpp, vllm, "")
    # (monotonic end, completion tokens, seconds) of its calls in the last RATE_WINDOW_SECONDS,
    # oldest first, and their sums: a call adds one and drops the expired. Read at every call,
    # a pass over all of them cost 0.5 ms at 12,000 (ten minutes of 50 ms calls).
    recent: deque[tuple[float, int, float]] = field(default_factory=deque)
    _tokens: int = field(default=0, init=False)
    _seconds: float = field(default=0.0, init=False)
    empty_in_row: int = 0  # empty replies since its last success
    # Why its ``/metrics`` page is unusable ("": it reads; None: not watched, no such page).
    metrics_fault: str | None = None

    @property
    def name(self) -> str:
        """The endpoint's name (normalised URL, no credentials)."""
        return self.gate.endpoint

    @property
    def state(self) -> str:
        if not self.breaker.allows():
            return State.DOWN
        return State.PROBING if self.breaker.failures else State.UP

    def available(self) -> bool:
        """Up, or probing with no call under way."""
        state = self.state
        return state == State.UP or (state == State.PROBING and self.committed == 0)

    def answered_empty(self, error: LLMError) -> None:
        """A call here got a 200 with no text (``llm_empty``): its ``EMPTY_REPLIES_TO_PAUSE``-th
        in a row, or one while it is probed, opens its breaker."""
        self.empty_in_row += 1
        if self.empty_in_row >= EMPTY_REPLIES_TO_PAUSE or self.breaker.failures:
            self.breaker.trip(error)

    def succeeded(self) -> None:
        self.empty_in_row = 0
        self.breaker.success()

    def served(self, tokens: int | None, seconds: float) -> None:
        self._expire()
        self.recent.append((time.monotonic(), tokens or 0, seconds))
        self._tokens += tokens or 0
        self._seconds += seconds

    def _expire(self) -> None:
        now = time.monotonic()
        while self.recent and now - self.recent[0][0] > RATE_WINDOW_SECONDS:
            _, tokens, seconds = self.recent.popleft()
            self._tokens -= tokens
            self._seconds -= seconds

    def call_seconds(self) -> float | None:
        """The mean wall time of its recent calls, server queueing included (None: no call)."""
        self._expire()
        return self._seconds / len(self.recent) if self.recent else None

    def expected_wait(self, default_seconds: float) -> float:
        """When one more call here would end, about: the calls bound for it, this one
        included, times a call's time (``default_seconds`` before it served), over its limit."""
        return (self.committed + 1) * (self.call_seconds() or default_seconds) / self.gate.limit

    def tokens_per_second(self) -> float | None:
        """Completion tokens/s of its recent calls: one call's speed (None: no call)."""
        self._expire()
        return round(self._tokens / self._seconds, 1) if self.recent and self._seconds > 0 else None

    def report(self) -> dict[str, Any]:
        """What a consumer records of it (``QueueConsumer.endpoints``)."""
        error = self.breaker.last_error
        return {
            "name": self.name,
            # Whole, unlike ``llm_url``'s column cut to its width: what health probes.
            "url": self.endpoint.shown_url,
            "model": self.endpoint.model,
            "state": self.state,
            "limit": self.gate.limit,
            "held": self.gate.held,
            "tokens_per_second": self.tokens_per_second(),
            "error": error.code if error is not None and self.breaker.failures else "",
            # Why, in the server's words (redacted by the client): a code alone does not
            # tell a wrong URL from a bad key.
            "detail": error.message[:300] if error is not None and self.breaker.failures else "",
            # Since when it has been failing (ISO 8601; "" while it answers).
            "since": since.isoformat() if (since := self.breaker.failing_since) else "",
            "auto": self.gate.controller is not None,
            # The most calls its gate tries, and which server's word set it ("": settings).
            "ceiling": self.gate.permits,
            "server": self.server,
            "metrics_fault": self.metrics_fault or "",
        }


@dataclass(frozen=True)
class Held:
    """A slot of one member's gate, held for the body of ``EndpointPool.slot``."""

    pool: EndpointPool
    member: Member
    slot: int
    prefix: str | None
    replies: list[LLMReply] = field(default_factory=list)  # measured once the slot is free

    async def chat(self, messages: list[dict[str, str]], **options: Any) -> LLMReply:
        """One call through the held slot; the reply names the endpoint. Raises ``LLMError``."""
        member, prefix = self.member, self.prefix
        reply = await member.client.chat(
            messages,
            on_sent=lambda: member.gate.sent(self.slot),
            on_first_token=(lambda: member.gate.warmed(prefix)) if prefix else None,
            **options,
        )
        if prefix is not None:
            self.pool.affinity[prefix] = member
        self.replies.append(reply := dataclasses.replace(reply, endpoint=member.name))
        return reply

    async def measure(self) -> None:
        """Once the slot is given back, record each reply's tokens and time (the gate's and
        the endpoint's rates), the tokens of those whose stream reported none counted by
        the server's tokenizer first (``LLMClient.tokens_in``; set in the replies the
        caller holds): a slow tokenizer never delays another call."""
        for reply in self.replies:
            count = await self.member.client.tokens_in(reply)
            if count is not None:
                reply.completion_tokens = count
            seconds = reply.elapsed_ms / 1000
            self.member.gate.record(tokens=reply.completion_tokens, seconds=seconds)
            self.member.served(reply.completion_tokens, seconds)


class EndpointPool:
    """The members, and the choice of one per call; see the module."""

    def __init__(
        self,
        members: Iterable[Member],
        make_gate: Callable[[Endpoint, LLMClient], LLMGate] | None = None,
    ) -> None:
        self.members = list(members)
        self.make_gate = make_gate  # a member's gate anew, when its server says its ceiling
        self._synced_at = 0.0  # the last sync of the adaptive gates' shared limits
        if not self.members:
            raise ValueError("an endpoint pool needs at least one endpoint")
        self.affinity: dict[str, Member] = {}  # prompt prefix -> the member that served it last

    @classmethod
    def build(
        cls, endpoints: Iterable[Endpoint], gate_for: Callable[[Endpoint, LLMClient], LLMGate]
    ) -> EndpointPool:
        """A pool of ``endpoints``, each with a client from the settings and ``gate_for``'s gate."""
        clients = [(endpoint, LLMClient.from_settings(endpoint)) for endpoint in endpoints]
        return cls([Member(e, client, gate_for(e, client)) for e, client in clients], gate_for)

    def choose(self, prefix: str | None = None, avoid: Collection[Member] = ()) -> Member:
        """The member for the next call (not one of ``avoid``, which failed it already)."""
        open_ = [m for m in self.members if m not in avoid] or self.members
        candidates = [m for m in open_ if m.available()]
        if not candidates:
            # Every one is down or probed: the one back soonest (the caller hands back its job).
            return min(open_, key=lambda m: m.breaker.remaining())
        probed = [m for m in candidates if m.state == State.PROBING]
        if probed:
            # Its pause is over: one call says whether it is back (a failure fails over), even
            # while another keeps up with the work; else it would rejoin only under load.
            return probed[0]
        last = self.affinity.get(prefix) if prefix is not None else None
        if last in candidates and last.committed < last.gate.limit:
            return last
        # The one where it would end soonest; ties to the one that served the prefix, then
        # order. A server not measured yet counts a call as long as the others' do.
        measured = [s for m in candidates if (s := m.call_seconds()) is not None]
        default = statistics.fmean(measured) if measured else 1.0
        return min(candidates, key=lambda m: (m.expected_wait(default), m is not last))

    def other_available(self, avoid: Collection[Member]) -> bool:
        """Whether a member not in ``avoid`` may take a call now."""
        return any(m.available() for m in self.members if m not in avoid)

    @contextlib.asynccontextmanager
    async def slot(
        self, prefix: str | None = None, avoid: Collection[Member] = ()
    ) -> AsyncIterator[Held]:
        """Hold the chosen member's gate slot for the ``async with`` (may raise ``GateTimeout``)."""
        member = self.choose(prefix, avoid)
        member.committed += 1
        try:
            async with member.gate.slot(prefix=prefix) as slot:
                yield (held := Held(self, member, slot, prefix))
        finally:
            member.committed -= 1
        await held.measure()

    # What the consumer's cycle asks of the servers as a whole.

    def allows(self) -> bool:
        """Whether claiming may go on: some endpoint's breaker is closed."""
        return any(m.breaker.allows() for m in self.members)

    def remaining(self) -> float:
        """Seconds until claiming may resume (0: some endpoint is up)."""
        return max(0.0, self.open_until - time.monotonic())

    @property
    def failures(self) -> int:
        """The most failures in a row of any endpoint (0: none failing)."""
        return max(m.breaker.failures for m in self.members)

    @property
    def last_error(self) -> LLMError | None:
        """While every endpoint is down: the error of the one back soonest."""
        if self.allows():
            return None
        return min(self.members, key=lambda m: m.breaker.remaining()).breaker.last_error

    @property
    def open_until(self) -> float:
        """Monotonic time claiming resumes at (0: some endpoint is up)."""
        if self.allows():
            return 0.0
        return min(m.breaker.open_until for m in self.members)

    @property
    def failing_since(self) -> datetime | None:
        """Since when every endpoint has been failing (None: some endpoint is up)."""
        if self.allows():
            return None
        return max(filter(None, (m.breaker.failing_since for m in self.members)), default=None)

    @property
    def limit(self) -> int:
        """Calls the endpoints that are up let through now, together (at least 1)."""
        return max(1, sum(m.gate.limit for m in self.members if m.breaker.allows()))

    @property
    def free(self) -> int:
        """Calls that may start now on the endpoints that are up."""
        return sum(
            max(0, min(m.gate.free_slots, m.gate.limit - m.gate.held))
            for m in self.members
            if m.breaker.allows()
        )

    def report(self) -> list[dict[str, Any]]:
        return [m.report() for m in self.members]

    async def ask_servers(self) -> None:
        """``GATE_PERMITS=auto``: ask each server what it can take (``server_limits``) and
        number its gate's slots (and its client's connections) up to that, before any call."""
        for member in self.members:
            if member.gate.controller is None:
                continue
            said = await server_limits.ask(member.client)
            member.server, member.metrics_fault = said.server, said.fault or None
            ceiling = said.ceiling(member.endpoint.max_permits)
            logger.info(
                "study_gate_ceiling endpoint=%s server=%s ceiling=%s gate_max_permits=%s",
                member.name,
                said.server or "-",
                ceiling,
                member.endpoint.max_permits,
            )
            if ceiling == member.gate.permits or self.make_gate is None:
                continue
            endpoint = dataclasses.replace(member.endpoint, max_permits=ceiling)
            old = member.client
            member.endpoint, member.client = endpoint, LLMClient.from_settings(endpoint)
            member.gate = self.make_gate(endpoint, member.client)
            await old.aclose()

    async def watch_servers(self) -> None:
        """Auto gates on vLLM (or an unusable page): requests waiting there stop the climb."""
        for member in self.members:
            watched = member.server == server_limits.VLLM or member.metrics_fault is not None
            if watched and member.gate.controller is not None:
                said = await server_limits.load(member.client)
                member.metrics_fault = said.fault
                if said.waiting:
                    member.gate.server_full()

    async def sync_gates(self, run_db: RunDB) -> None:
        """``GATE_PERMITS=auto``: share each adaptive gate's limit through ``GateLimit``: restore
        the stored one first, then store this gate's moves and adopt others', at once after a
        move, else every ``GATE_SYNC_SECONDS``."""
        gates = [m.gate for m in self.members if m.gate.controller is not None]
        moved = [
            g for g in gates if g.synced_limit is not None and g.shared_limit != g.synced_limit
        ]
        if not moved and time.monotonic() - self._synced_at < GATE_SYNC_SECONDS:
            return
        self._synced_at = time.monotonic()
        if gates:
            await self.watch_servers()
        for gate in gates:
            try:
                await self._sync_one(gate, run_db, moved=gate in moved)
            except DatabaseError as exc:
                logger.warning(
                    "study_gate_sync_failed endpoint=%s error=%s", gate.endpoint, type(exc).__name__
                )
                return

    async def _sync_one(self, gate: LLMGate, run_db: RunDB, *, moved: bool) -> None:
        assert gate.controller is not None
        if gate.synced_limit is None:
            stored = await run_db(gate_limits.load, gate.endpoint)
            if stored is not None:
                gate.restore(stored.limit, dict(stored.measured()))
        limit = await run_db(
            gate_limits.sync,
            gate.endpoint,
            limit=gate.shared_limit,  # not capped by this consumer's GATE_MAX_PERMITS
            rates=dict(gate.controller.rates),
            changed_from=gate.synced_limit if moved else None,
            reason=gate.last_reason,
        )
        gate.adopt(limit)

    async def aclose(self) -> None:
        for member in self.members:
            await member.client.aclose()
