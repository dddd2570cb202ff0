"""A run's updates as the parts every protocol renders: what AG-UI, the Responses API and Chat
Completions share of turning :class:`~agentkeep.agent.AgentResponseUpdate` objects into events.

Each protocol walks the same parts of an update in order: the assistant's text (empty deltas
skipped), its tool calls, and, for the protocols that show them, the results of tools the run
called (:func:`rendered_parts`); each renders them in its own event shapes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from ..contents import FunctionCallContent, FunctionResultContent, TextContent

if TYPE_CHECKING:
    from ..agent import AgentResponseUpdate

__all__ = ["rendered_parts"]


def rendered_parts(
    update: AgentResponseUpdate, *, results: bool = False
) -> Iterator[TextContent | FunctionCallContent | FunctionResultContent]:
    """The parts of ``update`` a protocol renders, in order: the assistant's non-empty texts, its
    tool calls and (with ``results``) the tool results of the run's own tools."""
    assistant = update.role == "assistant"
    for content in update.contents:
        if isinstance(content, TextContent):
            if assistant and content.text:
                yield content
        elif isinstance(content, FunctionCallContent):
            if assistant:
                yield content
        elif results and isinstance(content, FunctionResultContent):
            yield content
