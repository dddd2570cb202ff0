"""A user's profile: :class:`ProfileMemoryProvider`, seed 004's user-info memory generalized.

You give a schema of facts (a pydantic model, a dataclass or a msgspec struct whose fields are
optional: ``name: str | None = None``). After each run that succeeded, one structured-output call
fills the schema from the turn (grammar-constrained with the local model, so the reply always
parses); the values are merged into the profile field by field:

* a value that differs from the stored one **replaces** it (a newer fact wins: the user moved);
  the older value stays in the field's history (``store.history(scope, "profile.<field>")``);
* the same value again changes nothing;
* an empty value (``None``: the turn did not mention it) never erases a stored one.

An update that fails (the model is down, the reply does not fit the schema, the store is
unreachable) is logged (``agentkeep.memory``) and changes nothing; the turn, which succeeded, is
not reported failed. An expired value stated again is written again.

Before each run the profile is added to the instructions ("What you know about the user: name:
Maren; age: 34."). The profile is kept per memory scope (whose: :func:`~agentkeep.memory.semantic.
set_memory_user`); a session without a user gets none. The records need no embeddings.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar, cast

from ..clients.base import ChatClient, ChatOptions
from ..errors import AgentkeepError
from ..messages import Message
from ..providers.context import AIContext, ContextProvider, SessionContext
from ..sessions import AgentSession, to_builtins
from .base import MemoryStore, rewrite_keyed
from .records import MemoryRecord, MemoryScope
from .semantic import memory_scope, transcript

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["PROFILE_INSTRUCTIONS", "ProfileMemoryProvider"]

P = TypeVar("P")
_log = logging.getLogger("agentkeep.memory")
_KIND: Final = "profile"

PROFILE_INSTRUCTIONS: Final = (
    "Fill in what the user says about themselves in this conversation turn. Use null for every "
    "field the turn does not mention; do not guess."
)


class ProfileMemoryProvider(ContextProvider, Generic[P]):
    """A profile of facts about the user, extracted after each run and injected before the next
    (module docs).

    Args:
        store: Where the profile lives.
        schema: The profile's type (fields optional).
        client: The chat client that extracts the facts.
        instructions: How to extract (default: :data:`PROFILE_INSTRUCTIONS`).
        max_tokens: The most tokens the extraction may take (room for the whole JSON).
        scope: Whose profile a session reads (default: the session's memory user).
        source_id: Unique id within the agent.
    """

    DEFAULT_SOURCE_ID = "profile_memory"
    keeps_session_state = False  # the memories are in the store

    def __init__(
        self,
        store: MemoryStore,
        schema: type[P],
        client: ChatClient,
        *,
        instructions: str = PROFILE_INSTRUCTIONS,
        max_tokens: int = 256,
        scope: Callable[[AgentSession], MemoryScope | None] = memory_scope,
        source_id: str = DEFAULT_SOURCE_ID,
    ) -> None:
        super().__init__(source_id)
        self.store = store
        self.schema = schema
        self.client = client
        self.instructions = instructions
        self.max_tokens = max_tokens
        self.scope = scope

    async def profile(self, scope: MemoryScope) -> dict[str, Any]:
        """The profile of ``scope``: field name to its current value (fields never filled are absent)."""
        found: dict[str, Any] = {}
        for record in await self.store.list_memories(scope, kind=_KIND):
            if record.key is not None and "value" in record.metadata:
                found[record.key.removeprefix("profile.")] = record.metadata["value"]
        return dict(sorted(found.items()))

    async def extract(self, messages: list[Message]) -> dict[str, Any]:
        """The fields one turn filled (empty ones left out)."""
        said = transcript(messages)
        options: ChatOptions = {
            "instructions": self.instructions,
            "response_format": self.schema,
            "max_tokens": self.max_tokens,
        }
        response = await self.client.get_response([Message("user", said)], options=options)
        if response.value is None:
            return {}
        values: Any = to_builtins(response.value)
        if not isinstance(values, Mapping):
            return {}
        return {
            str(k): v for k, v in cast("Mapping[Any, Any]", values).items() if v not in (None, "", [], {})
        }

    async def merge(
        self, scope: MemoryScope, values: Mapping[str, Any], *, session_id: str | None = None
    ) -> list[str]:
        """Merge ``values`` into the profile (module docs); returns the fields that changed."""
        changed: list[str] = []
        for field, value in values.items():

            def replace(
                current: MemoryRecord | None, field: str = field, value: Any = value
            ) -> MemoryRecord | None:
                if current is not None and _same(current.metadata.get("value"), value):
                    return None  # the same value again: nothing to do
                shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
                return MemoryRecord(
                    f"{field}: {shown}"[:4_000],
                    key=f"profile.{field}",
                    kind=_KIND,
                    source_session_id=session_id,
                    metadata={"value": value},
                )

            if await rewrite_keyed(self.store, scope, f"profile.{field}", replace) is not None:
                changed.append(field)
        return changed

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        scope = self.scope(session)
        if scope is None:
            return None
        try:
            known = await self.profile(scope)
        except AgentkeepError as exc:  # memory unavailable: the run goes on without it
            _log.warning("reading the profile failed for %s: %s", scope, exc)
            return None
        if not known:
            return None
        facts = "; ".join(f"{field}: {value}" for field, value in known.items())
        return AIContext(instructions=f"What you know about the user (from earlier conversations): {facts}.")

    async def after_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> None:
        scope = self.scope(session)
        if scope is None or context.exception is not None:
            return
        if not any(m.role == "user" and m.text.strip() for m in context.input_messages):
            return
        try:
            values = await self.extract([*context.input_messages, *context.response_messages])
            if values:
                await self.merge(scope, values, session_id=session.session_id)
        except (AgentkeepError, LookupError) as exc:
            # The turn itself succeeded: memory bookkeeping must not report it failed (nor keep
            # the history providers after this one from storing it). The profile learns nothing.
            _log.warning("profile update failed for %s: %s", scope, exc)

    def __repr__(self) -> str:
        return f"ProfileMemoryProvider(schema={self.schema.__name__}, store={self.store!r})"


def _same(a: Any, b: Any) -> bool:
    """JSON equality (``True`` is not ``1``, ``1.0`` is not ``1``)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
