"""Semantic recall across sessions: :class:`SemanticMemoryProvider`, and whose memories a session
reads (:func:`set_memory_user`, :func:`memory_scope`).

**Whose memories.** A session names its user with :func:`set_memory_user` (kept in its state);
its tenant is its isolation key. A session with no user reads and writes no memories: nothing is
shared by default.

**Before each run** the provider embeds the new user input and finds the ``top_k`` memories of
the scope that best match it, from any earlier session of the user: by meaning and by words
fused (``mode="hybrid"``, the default: a memory that shares the input's rarer words is found
even when its embedding is not among the nearest), or by one of them; a search by meaning embeds
the input without the names of the speakers it names (:meth:`SemanticMemoryProvider.unnamed`).
It adds them as one context message (role ``system`` by default) that gives today's date and
each memory's date, speaker and source session, so the model can place "last spring" or "two
weeks ago"; each recalled chunk comes with what was said next in its session (``window``: that
many of the memories said after it, see :meth:`~agentkeep.memory.MemoryStore.following`), so a
question found by the words of its answer brings the answer along.

**After a run that succeeded** it remembers: with a :class:`FactExtractor`, the facts one
structured-output call finds in the turn (each with a key: what it is about); otherwise the
user's messages themselves, as chunks. Each memory carries its context: ``created_at`` is when
its message was said (the message's own ``created_at``), ``source_session_id`` its session, and
its metadata the message's id (``message_id``; a fact: ``message_ids``), its ``speaker`` (the
author's name, else the role), ``role``, and a chunk also ``context``: ``"speaker: text"`` of the
message said just before it in the session (kept in the session's state between turns, at most
500 characters), indexed with its words so that a reply is found by what it answers. The rules
(see :mod:`agentkeep.memory.records`):

* *near-identical* memories are kept once: a new text whose nearest memory of the same key (a
  chunk: of the same speaker) scores at least ``dedupe_threshold`` replaces it, with the newer
  text, date and metadata; the older stays in the key's history (every chunk gets a key of its
  own, ``chunk.<id of its first version>``, for this); chunks of different speakers never merge;
* *contradicting* memories are resolved by their key: a newer fact about ``home_city`` replaces
  the older one (which stays in the key's history and is no longer recalled); chunks are never
  taken to contradict each other.

When the memory store cannot be read the run goes on without memories (logged). A failed run
remembers nothing; when remembering fails (the extraction call, the store, the
embedder; logged as ``agentkeep.memory``) nothing of that turn is remembered and the turn, which
succeeded, is not reported failed. Fact keys are namespaced (``fact.home_city``), so a model's
key can never name a profile field or a memory block.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, cast

from ..clients.base import ChatClient, ChatOptions
from ..errors import AgentkeepError
from ..messages import Message
from ..providers.context import AIContext, ContextProvider, SessionContext
from ..sessions import AgentSession
from ._lexical import SearchMode, names_in, query_terms, without_names
from .base import MemoryStore, check_mode
from .embedders import Embedder
from .records import MAX_MEMORY_TEXT, MemoryHit, MemoryRecord, MemoryScope

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = [
    "CHUNK_KEY_PREFIX",
    "MEMORY_USER_KEY",
    "NAMED_FROM",
    "ExtractedFact",
    "ExtractedFacts",
    "FactExtractor",
    "SemanticMemoryProvider",
    "memory_scope",
    "render_memories",
    "set_memory_user",
    "transcript",
]

_log = logging.getLogger("agentkeep.memory")

MEMORY_USER_KEY: Final = "agentkeep.memory.user"
"""Where a session keeps the user (and agent) its memories belong to."""


def set_memory_user(session: AgentSession, user_id: str, *, agent_id: str | None = None) -> MemoryScope:
    """Make ``session``'s memories those of ``user_id`` (of ``agent_id``, ``None``: shared by the
    user's agents) in the session's tenant; returns the scope.

    Raises:
        MemoryFormatError: An empty or malformed id.
    """
    scope = MemoryScope(user_id, tenant_id=session.isolation_key, agent_id=agent_id)
    session.state.set(MEMORY_USER_KEY, {"user_id": user_id, "agent_id": agent_id})
    return scope


def memory_scope(session: AgentSession) -> MemoryScope | None:
    """The scope :func:`set_memory_user` gave ``session`` (``None``: it has no user)."""
    value: Any = session.state.get(MEMORY_USER_KEY)
    if not isinstance(value, dict):
        return None
    fields = cast("dict[str, Any]", value)
    user, agent = fields.get("user_id"), fields.get("agent_id")
    if not isinstance(user, str):
        return None
    return MemoryScope(
        user, tenant_id=session.isolation_key, agent_id=agent if isinstance(agent, str) else None
    )


# -- fact extraction ---------------------------------------------------------------------------------


@dataclass
class ExtractedFact:
    """One fact about the user: what it is about (a short snake_case key) and the fact."""

    key: str
    text: str


@dataclass
class ExtractedFacts:
    """The facts one turn told about the user."""

    facts: list[ExtractedFact] = field(default_factory=list[ExtractedFact])


EXTRACT_INSTRUCTIONS: Final = (
    "List the lasting facts the user states about themselves in this conversation turn "
    "(name, age, home, work, family, preferences, plans). For each give a short snake_case key "
    "naming what the fact is about (home_city, favourite_drink, ...) and the fact as one short "
    "sentence about 'the user'. Leave out questions, greetings and anything the assistant said. "
    "If there are none, return an empty list."
)


class FactExtractor:
    """Finds facts in a turn with one structured-output call (works with the local model's
    grammar-constrained output).

    Args:
        client: The chat client to ask.
        instructions: What to extract (default: :data:`EXTRACT_INSTRUCTIONS`).
    """

    def __init__(self, client: ChatClient, *, instructions: str = EXTRACT_INSTRUCTIONS) -> None:
        self.client = client
        self.instructions = instructions

    async def extract(self, messages: Sequence[Message]) -> list[ExtractedFact]:
        """The facts in ``messages`` (keys lower-cased; empty facts left out)."""
        said = transcript(messages)
        if not said:
            return []
        options: ChatOptions = {
            "instructions": self.instructions,
            "response_format": ExtractedFacts,
            "max_tokens": 512,
        }
        response = await self.client.get_response([Message("user", said)], options=options)
        value = response.value
        if not isinstance(value, ExtractedFacts):
            return []
        facts: list[ExtractedFact] = []
        for item in value.facts:
            # Facts' keys get a namespace of their own: a model's key can never name a profile
            # field or a memory block.
            key = "_".join(item.key.lower().split())[:80]
            text = item.text.strip()[:MAX_MEMORY_TEXT]
            if key and text:
                facts.append(ExtractedFact(f"fact.{key}", text))
        return facts


NAMED_FROM: Final = 10
"""How many of the memories a question's words find tell the speakers it may name
(:meth:`SemanticMemoryProvider.unnamed`; 10 and 50 gave the same recall on both evaluation sets,
and 10 reads a fifth of the rows)."""


# -- the provider -----------------------------------------------------------------------------------


class SemanticMemoryProvider(ContextProvider):
    """Recall of a user's memories across sessions (module docs).

    Args:
        store: Where memories live.
        embedder: Turns texts into vectors (its ``dimensions`` must be the store's).
        extractor: Remember facts it finds instead of the user's messages.
        scope: Whose memories a session reads (default: :func:`memory_scope`).
        top_k: How many memories to recall per run.
        min_score: The least similarity a memory found by meaning has (in hybrid mode, one that
            shares the input's words is recalled whatever its similarity).
        mode: How memories are found: ``"hybrid"`` (meaning and words, fused), ``"vector"`` or
            ``"lexical"`` (see :meth:`~agentkeep.memory.MemoryStore.search`).
        order: How the recalled memories are listed to the model: most relevant first
            (``"relevance"``) or oldest first (``"time"``: a story in the order it happened).
        window: How many of the memories said next in its session each recalled chunk is shown
            with (0: none).
        dedupe_threshold: From this similarity on, a new memory is the same as an existing one.
        role: The role of the recalled-memories message.
        source_id: Unique id within the agent.

    Raises:
        ValueError: The embedder's dimensions differ from the store's, or a threshold is out of range.
    """

    DEFAULT_SOURCE_ID = "semantic_memory"
    keeps_session_state = False  # the memories are in the store

    def __init__(
        self,
        store: MemoryStore,
        embedder: Embedder,
        *,
        extractor: FactExtractor | None = None,
        scope: Callable[[AgentSession], MemoryScope | None] = memory_scope,
        top_k: int = 5,
        min_score: float = 0.2,
        mode: SearchMode = "hybrid",
        order: Literal["relevance", "time"] = "relevance",
        window: int = 1,
        dedupe_threshold: float = 0.95,
        role: Literal["system", "user"] = "system",
        source_id: str = DEFAULT_SOURCE_ID,
    ) -> None:
        super().__init__(source_id)
        if embedder.dimensions != store.dimensions:
            raise ValueError(
                f"the embedder gives {embedder.dimensions} dimensions; the store holds {store.dimensions}"
            )
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        if not -1.0 <= min_score <= 1.0 or not 0.0 < dedupe_threshold <= 1.0:
            raise ValueError("min_score must be in [-1, 1] and dedupe_threshold in (0, 1]")
        self.store = store
        self.embedder = embedder
        self.extractor = extractor
        self.scope = scope
        self.top_k = top_k
        self.min_score = min_score
        check_mode(mode)
        self.mode: SearchMode = mode
        if order not in ("relevance", "time"):
            raise ValueError(f"order must be 'relevance' or 'time', not {order!r}")
        self.order: Literal["relevance", "time"] = order
        if not 0 <= window <= MAX_WINDOW:
            raise ValueError(f"window must be between 0 and {MAX_WINDOW}")
        self.window = window
        self.dedupe_threshold = dedupe_threshold
        self.role: Literal["system", "user"] = role

    async def recall(
        self,
        scope: MemoryScope,
        text: str,
        *,
        vector: list[float] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[MemoryHit]:
        """The memories of ``scope`` that best match ``text`` (what a run would be given;
        ``vector``: ``text``'s embedding, when the caller has it), of those said in
        ``[since, until)`` when given."""
        if self.mode == "lexical":
            return await self._search(scope, text, None, since=since, until=until)
        searched = await self.query_vector(scope, text, vector=vector)
        return await self._search(scope, text, searched, since=since, until=until)

    async def query_vector(
        self, scope: MemoryScope, text: str, *, vector: list[float] | None = None
    ) -> list[float]:
        """The embedding a search of ``text`` in ``scope`` ranks by (``vector``: ``text``'s own,
        when the caller has it): that of ``text`` without the names of the scope's speakers it
        names (:meth:`unnamed`), or ``text``'s when it names none."""
        asked = await self.unnamed(scope, text)
        if asked != text or vector is None:
            (vector,) = await self.embedder.embed([asked])
        return vector

    async def unnamed(self, scope: MemoryScope, text: str) -> str:
        """What of ``text`` a search by meaning embeds: ``text`` without the names of the
        speakers of ``scope`` it names (:func:`~._lexical.without_names`).

        A memory is embedded without its speaker's name, so a name left in the question ("What
        did Caroline research?") pulls its embedding toward the memories that mention the name
        rather than toward what was said about the subject; a fused search matches the name by
        its preference for memories said by someone the query names. The speakers are those of
        the memories the question's words find (a memory's speaker is indexed with its words):
        one search by words, of :data:`NAMED_FROM` memories (docs/memory.md, "Names in the
        question")."""
        terms = query_terms(text)
        if not terms:
            return text
        found = await self.store.search(scope, None, k=NAMED_FROM, text=text, mode="lexical")
        speakers = {hit.record.metadata.get("speaker") for hit in found}
        return without_names(text, [s for s in speakers if isinstance(s, str) and names_in(terms, s)])

    async def _search(
        self,
        scope: MemoryScope,
        text: str,
        vector: list[float] | None,
        *,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[MemoryHit]:
        if vector is None:
            return await self.store.search(
                scope, None, k=self.top_k, text=text, mode="lexical", since=since, until=until
            )
        return await self.store.search(
            scope,
            vector,
            k=self.top_k,
            min_score=self.min_score,
            text=text,
            mode=self.mode,
            since=since,
            until=until,
        )

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        scope = self.scope(session)
        query = _user_text(context.input_messages)
        if scope is None or not query:
            return None
        try:
            asked = query if self.mode == "lexical" else await self.unnamed(scope, query)
            # one model call: the input as said (remembered after the run: its embedding is
            # made once, here) and, when it names speakers, what the search embeds of it
            vectors = await self.embedder.embed([query] if asked == query else [query, asked])
            context.metadata[self._vectors_key] = {query.strip(): vectors[0]}
            hits = await self._search(scope, query, None if self.mode == "lexical" else vectors[-1])
        except AgentkeepError as exc:  # memory unavailable: the run goes on without it
            _log.warning("recall failed for %s: %s", scope, exc)
            return None
        if not hits:
            return None
        try:
            after = await self.said_next(scope, hits)
        except AgentkeepError as exc:  # the memories found are given without what followed them
            _log.warning("reading what was said next failed for %s: %s", scope, exc)
            after = None
        rendered = render_memories(hits, order=self.order, following=after)
        return AIContext(messages=[Message(self.role, rendered)])

    async def said_next(self, scope: MemoryScope, hits: Sequence[MemoryHit]) -> list[list[MemoryRecord]]:
        """What was said next after each of ``hits`` that is a chunk (up to ``window`` memories of
        its session; see :meth:`~agentkeep.memory.MemoryStore.following`); facts get none."""
        chunks = [hit.record for hit in hits if hit.record.kind == "chunk"]
        if not self.window or not chunks:
            return [[] for _ in hits]
        # a store of the protocol's shape may lack it: the protocol's default then
        following = getattr(self.store, "following", None) or partial(MemoryStore.following, self.store)
        found = iter(await following(scope, chunks, limit=self.window))
        return [next(found) if hit.record.kind == "chunk" else [] for hit in hits]

    async def after_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> None:
        scope = self.scope(session)
        if scope is None or context.exception is not None:
            return
        try:
            turn = [*context.input_messages, *context.response_messages]
            await self.remember(scope, session, turn, known=context.metadata.get(self._vectors_key))
        except (AgentkeepError, LookupError) as exc:
            # The turn itself succeeded: memory bookkeeping must not report it failed (nor keep
            # the history providers after this one from storing it). Nothing of it is remembered.
            _log.warning("remembering a turn failed for %s: %s", scope, exc)

    @property
    def _vectors_key(self) -> str:
        return f"{self.source_id}:vectors"

    @property
    def _last_said_key(self) -> str:
        """The session state entry that keeps the last message remembered from (its context)."""
        return f"{self.source_id}:last_said"

    async def remember(
        self,
        scope: MemoryScope,
        session: AgentSession,
        messages: Sequence[Message],
        *,
        known: Mapping[str, list[float]] | None = None,
    ) -> None:
        """Remember a turn (its facts, or its user messages as chunks; module docs); ``known``:
        embeddings already made, by text."""
        said = [m for m in messages if m.role == "user" and m.text.strip()]
        if self.extractor is not None:
            facts = await self.extractor.extract(messages)
            ids = [m.message_id for m in said if m.message_id]
            context: dict[str, Any] = {"message_ids": ids} if ids else {}
            when = max((_said_at(m) for m in said), default=datetime.now(UTC))
            items = [_Item(f.key, f.text, "fact", context, when) for f in facts]
        else:
            items: list[_Item] = []
            before: Any = session.state.get(self._last_said_key)
            remembered = {id(m) for m in said}
            for m in messages:
                if id(m) in remembered:
                    context = _context(m, before if isinstance(before, str) else None)
                    items.extend(
                        _Item(None, part, "chunk", context, _said_at(m)) for part in _chunks(m.text.strip())
                    )
                if m.role in ("user", "assistant") and m.text.strip():
                    before = f"{_speaker(m)}: {m.text.strip()[:CONTEXT_CHARS]}"
            if isinstance(before, str):
                session.state.set(self._last_said_key, before)
        if not items:
            return
        vectors = dict(known or {})
        missing = list(dict.fromkeys(item.text for item in items if item.text not in vectors))
        if missing:
            vectors.update(zip(missing, await self.embedder.embed(missing), strict=True))
        for item in items:
            record = MemoryRecord(
                item.text,
                embedding=vectors[item.text],
                key=item.key,
                kind=item.kind,
                source_session_id=session.session_id,
                metadata=dict(item.metadata),
                created_at=item.said_at,
                updated_at=datetime.now(UTC),  # what a ttl counts from: when it was remembered
            )
            await self._remember(scope, record)

    async def _remember(self, scope: MemoryScope, record: MemoryRecord) -> None:
        """Add ``record``; one that is near-identical to a memory of its key (a chunk: of its
        speaker) replaces it, the older kept in the key's history (module docs)."""
        assert record.embedding is not None
        near = await self.store.search(
            scope, record.embedding, k=5, kind=record.kind, min_score=self.dedupe_threshold
        )
        same = next((hit.record for hit in near if _same_subject(hit.record, record)), None)
        if same is not None and same.key is None:  # a chunk kept before chunks had keys
            await self.store.update(
                scope, same.id, text=record.text, embedding=record.embedding, metadata=record.metadata
            )
            return
        if record.kind == "chunk":
            record.key = same.key if same is not None else f"{CHUNK_KEY_PREFIX}{record.id}"
        await self.store.add(scope, record)

    def __repr__(self) -> str:
        return f"SemanticMemoryProvider(source_id={self.source_id!r}, store={self.store!r})"


MAX_WINDOW: Final = 20
"""The most memories said next a recalled chunk can be shown with."""

CONTEXT_CHARS: Final = 500
"""How much of the message before a remembered one its chunk keeps as ``context`` (indexed with
its words, see :data:`~._lexical.INDEXED_METADATA`)."""

CHUNK_KEY_PREFIX: Final = "chunk."
"""What the key of a remembered chunk starts with (then the id of its first version)."""


@dataclass(frozen=True, slots=True)
class _Item:
    """What a turn gives to remember: a fact or a chunk, with its context and when it was said."""

    key: str | None
    text: str
    kind: str
    metadata: Mapping[str, Any]
    said_at: datetime


def _said_at(message: Message) -> datetime:
    return message.created_at or datetime.now(UTC)


def _speaker(message: Message) -> str:
    return message.author_name or message.role


def _context(message: Message, before: str | None) -> dict[str, Any]:
    """A message's context, as a chunk of it keeps it in its metadata: its speaker, role, id and
    what was said just before it (``before``)."""
    context: dict[str, Any] = {"speaker": _speaker(message), "role": message.role}
    if message.message_id:
        context["message_id"] = message.message_id
    if before:
        context["context"] = before
    return context


def _same_subject(found: MemoryRecord, record: MemoryRecord) -> bool:
    """Whether a near-identical ``found`` is what ``record`` says again: a fact of the same
    key, or a chunk of the same speaker."""
    if record.kind == "chunk":
        return found.metadata.get("speaker") == record.metadata.get("speaker")
    return found.key == record.key


def render_memories(
    hits: Sequence[MemoryHit],
    *,
    today: datetime | None = None,
    order: Literal["relevance", "time"] = "relevance",
    following: Sequence[Sequence[MemoryRecord]] | None = None,
) -> str:
    """The recalled-memories message: today's date, then one line per memory with the date it
    was said, its speaker, what it replied to (its ``context``, clipped) and its session, most
    relevant first (``order="time"``: oldest first); under each, what was said next
    (``following``: for each hit, as :meth:`SemanticMemoryProvider.said_next` gives it), each
    line clipped, and not again when it is listed already."""
    now = today or datetime.now(UTC)
    listed = "most relevant first" if order == "relevance" else "oldest first"
    lines = [
        f"Memories from earlier conversations with this user ({listed}; today is {now.date().isoformat()}):"
    ]
    pairs = list(zip(hits, following or [[] for _ in hits], strict=True))
    if order == "time":
        pairs.sort(key=lambda pair: (pair[0].record.created_at, pair[0].record.id))
    shown = {hit.record.id for hit in hits}
    for hit, after in pairs:
        record = hit.record
        source = f" (session {record.source_session_id})" if record.source_session_id else ""
        before = record.metadata.get("context")
        reply = f" (replying to {_clipped(before)})" if isinstance(before, str) and before else ""
        lines.append(f"- [{record.created_at.date().isoformat()}] {_who(record)}{record.text}{reply}{source}")
        for then in after:
            if then.id not in shown:
                shown.add(then.id)
                said = _clipped(then.text, RENDERED_NEXT_CHARS)
                lines.append(f"  then [{then.created_at.date().isoformat()}] {_who(then)}{said}")
    return "\n".join(lines)


def _who(record: MemoryRecord) -> str:
    """``"Name: "`` of a memory's speaker, when it has a name rather than just a role."""
    speaker = record.metadata.get("speaker")
    named = isinstance(speaker, str) and speaker and speaker != record.metadata.get("role")
    return f"{speaker}: " if named else ""


RENDERED_CONTEXT_CHARS: Final = 160
"""How much of a recalled chunk's context (what it replied to) the recalled line shows."""

RENDERED_NEXT_CHARS: Final = 320
"""How much of each memory said next after a recalled chunk the recalled lines show."""


def _clipped(text: str, limit: int = RENDERED_CONTEXT_CHARS) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."


def transcript(messages: Sequence[Message]) -> str:
    """A turn as ``role: text`` lines (user and assistant), what extraction calls read."""
    return "\n".join(f"{m.role}: {m.text}" for m in messages if m.text and m.role in ("user", "assistant"))


def _chunks(text: str) -> list[str]:
    """``text`` in pieces a memory can hold (a very long message is split, not refused)."""
    return [text[at : at + MAX_MEMORY_TEXT] for at in range(0, len(text), MAX_MEMORY_TEXT)]


def _user_text(messages: Sequence[Message]) -> str:
    return "\n".join(m.text for m in messages if m.role == "user" and m.text.strip())
