"""Memory blocks the agent edits itself: :class:`MemoryBlocksProvider`.

A block is a named, size-limited text (``human``: what the agent knows about the user;
``persona``: how it should act), kept per memory scope (:mod:`agentkeep.memory.semantic` says
whose) and pinned into the instructions of every run, with its size and limit. The model edits
the blocks through two tools the provider adds to each run:

* ``memory_append(block, text)`` — add a line to a block;
* ``memory_replace(block, old, new)`` — replace the one occurrence of ``old`` (``new`` may be
  empty, to delete).

An edit that would pass the block's limit, name an unknown block, or (for replace) find ``old``
nowhere or more than once is refused with a message the model reads (a tool error), and changes
nothing. Each edit is a new record of the block's key (``block.<name>``), so the store keeps every
version (``store.history(scope, "block.human")``); the write is a compare-and-set on the version
it was made from, so two runs editing one block at once never lose an edit (the later one is
applied to the newer text).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..errors import AgentkeepError, ConflictError, ToolError
from ..providers.context import AIContext, ContextProvider, SessionContext
from ..sessions import AgentSession
from ..tools import FunctionTool
from .base import MemoryStore, rewrite_keyed
from .records import MAX_MEMORY_TEXT, MemoryRecord, MemoryScope
from .semantic import memory_scope

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["MemoryBlock", "MemoryBlocksProvider"]

_log = logging.getLogger("agentkeep.memory")
_KIND: Final = "block"
_EMPTY: Final = "(empty block)"  # a record holds text; an emptied block is marked in its metadata


@dataclass(frozen=True, slots=True)
class MemoryBlock:
    """One block: its name, its size limit (characters), what it is for, and its first text."""

    name: str
    limit: int = 2_000
    description: str = ""
    initial: str = ""

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"a block name is a plain identifier, not {self.name!r}")
        if not 0 < self.limit <= MAX_MEMORY_TEXT:
            raise ValueError(f"a block's limit is between 1 and {MAX_MEMORY_TEXT} characters")
        if len(self.initial) > self.limit:
            raise ValueError(f"block {self.name!r}: the initial text is over its limit")

    @property
    def key(self) -> str:
        return f"block.{self.name}"


class MemoryBlocksProvider(ContextProvider):
    """Named memory blocks pinned into the instructions, edited by the model (module docs).

    Args:
        store: Where the blocks live (no embeddings needed: blocks are read by name).
        blocks: The blocks (default: ``human`` and ``persona``).
        scope: Whose blocks a session reads (default: the session's memory user).
        source_id: Unique id within the agent.
    """

    DEFAULT_SOURCE_ID = "memory_blocks"
    keeps_session_state = False  # the memories are in the store

    def __init__(
        self,
        store: MemoryStore,
        blocks: Sequence[MemoryBlock] | None = None,
        *,
        scope: Callable[[AgentSession], MemoryScope | None] = memory_scope,
        source_id: str = DEFAULT_SOURCE_ID,
    ) -> None:
        super().__init__(source_id)
        chosen = (
            list(blocks)
            if blocks is not None
            else [
                MemoryBlock("human", description="What you know about the user: facts, preferences, goals."),
                MemoryBlock("persona", description="Who you are for this user and how you should answer."),
            ]
        )
        names = [b.name for b in chosen]
        if not chosen or len(set(names)) != len(names):
            raise ValueError("give at least one block, each with its own name")
        self.store = store
        self.blocks = {b.name: b for b in chosen}
        self.scope = scope

    async def read(self, scope: MemoryScope) -> dict[str, MemoryRecord | None]:
        """Each block's current record in ``scope`` (``None``: never edited, it holds its initial text)."""
        current = {r.key: r for r in await self.store.list_memories(scope, kind=_KIND)}
        return {name: current.get(block.key) for name, block in self.blocks.items()}

    @staticmethod
    def _text(block: MemoryBlock, record: MemoryRecord | None) -> str:
        """A block's text: its record's, its initial text if never edited, "" once emptied."""
        if record is None:
            return block.initial
        return "" if record.metadata.get("empty") else record.text

    def render(self, texts: dict[str, str]) -> str:
        """The blocks as instructions."""
        lines = [
            "You have memory blocks that persist across conversations with this user. Keep them up "
            "to date with the memory_append and memory_replace tools when you learn something worth "
            "keeping; they are shown here every time."
        ]
        for name, block in self.blocks.items():
            text = texts[name]
            about = f" {block.description}" if block.description else ""
            lines.append(f'<block name="{name}" size="{len(text)}/{block.limit}">{about}\n{text}\n</block>')
        return "\n".join(lines)

    async def before_run(
        self, *, agent: Agent, session: AgentSession, context: SessionContext, state: Any
    ) -> AIContext | None:
        scope = self.scope(session)
        if scope is None:
            return None
        try:
            records = await self.read(scope)
        except AgentkeepError as exc:  # memory unavailable: the run goes on without its blocks
            _log.warning("reading memory blocks failed for %s: %s", scope, exc)
            return None
        texts = {name: self._text(self.blocks[name], record) for name, record in records.items()}
        return AIContext(instructions=self.render(texts), tools=self.tools(scope, session))

    # -- editing (what the tools do; an application may call these too) ---------------------------
    async def append(
        self, scope: MemoryScope, block: str, text: str, *, session_id: str | None = None
    ) -> str:
        """Add a line to ``block``; returns what the model is told.

        Raises:
            ToolError: An unknown block, or the limit would be passed.
        """
        return await self._edit(
            scope, session_id, block, lambda old: f"{old}\n{text}" if old else text, tool="memory_append"
        )

    async def replace(
        self, scope: MemoryScope, block: str, old: str, new: str, *, session_id: str | None = None
    ) -> str:
        """Replace the one occurrence of ``old`` in ``block`` with ``new``; returns what the model is told.

        Raises:
            ToolError: An unknown block, ``old`` nowhere or more than once, or the limit passed.
        """

        def change(current: str) -> str:
            found = current.count(old) if old else 0
            if found != 1:
                where = "nowhere" if found == 0 else f"{found} times"
                raise ToolError(
                    f"{old!r} occurs {where} in block {block!r}; quote it exactly, once",
                    tool_name="memory_replace",
                )
            return current.replace(old, new, 1)

        return await self._edit(scope, session_id, block, change, tool="memory_replace")

    def tools(self, scope: MemoryScope, session: AgentSession) -> list[FunctionTool]:
        """The two editing tools, bound to ``scope`` (what each run of ``session`` gets)."""
        names = ", ".join(self.blocks)

        async def memory_append(block: str, text: str) -> str:
            """Add a line of text to the end of one of your memory blocks."""
            return await self.append(scope, block, text, session_id=session.session_id)

        async def memory_replace(block: str, old: str, new: str) -> str:
            """Replace the one occurrence of `old` in a memory block with `new` (empty: delete it)."""
            return await self.replace(scope, block, old, new, session_id=session.session_id)

        return [
            FunctionTool(memory_append, description=f"Add a line to a memory block ({names})."),
            FunctionTool(memory_replace, description=f"Replace text in a memory block ({names})."),
        ]

    async def _edit(
        self,
        scope: MemoryScope,
        session_id: str | None,
        name: str,
        change: Callable[[str], str],
        *,
        tool: str,
    ) -> str:
        block = self.blocks.get(name)
        if block is None:
            known = sorted(self.blocks)
            raise ToolError(f"there is no memory block {name!r}; the blocks are {known}", tool_name=tool)
        written: list[str] = []

        def edit(current: MemoryRecord | None) -> MemoryRecord:
            text = change(self._text(block, current)).strip()
            if len(text) > block.limit:
                raise ToolError(
                    f"block {name!r} would hold {len(text)} characters; its limit is {block.limit}: "
                    "make room first (memory_replace)",
                    tool_name=tool,
                )
            written[:] = [text]
            return MemoryRecord(
                text or _EMPTY,
                key=block.key,
                kind=_KIND,
                source_session_id=session_id,
                metadata={} if text else {"empty": True},
            )

        try:
            await rewrite_keyed(self.store, scope, block.key, edit)
        except ConflictError as exc:
            raise ToolError(f"block {name!r} is being edited elsewhere; try again", tool_name=tool) from exc
        return f"block {name!r} now holds {len(written[0])} of {block.limit} characters"

    def __repr__(self) -> str:
        return f"MemoryBlocksProvider(blocks={list(self.blocks)!r}, store={self.store!r})"
