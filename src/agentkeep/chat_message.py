"""The earlier API's message: :class:`ChatMessage`, a :class:`~agentkeep.messages.Message` whose
role has ``.value`` (seed 004 reads ``message.role.value``), built with ``text=``, with pydantic's
``model_dump`` / ``model_validate`` spelling (seed 003's Redis store uses them).

A ``ChatMessage`` *is* a ``Message``: it goes through the pipeline, the stores and the clients
unchanged, and its wire form is the same (the role as plain text). Its copies are
``ChatMessage`` objects; a plain ``Message`` made from one (or copied from one) holds its role as
plain text. Earlier-shape hooks receive the run's messages as ``ChatMessage`` copies
(:func:`as_chat_messages`; contents are shared, so a copy costs one small object per new message).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from .contents import Content, TextContent
from .messages import Message, Role

__all__ = ["ChatMessage", "ChatRole", "as_chat_messages"]


class ChatRole(StrEnum):
    """The earlier API's ``Role``: a role name with ``.value``, equal to (and hashed like) the
    plain name (``ChatRole.USER == "user"``)."""

    SYSTEM = "system"
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class ChatMessage(Message):
    """A :class:`~agentkeep.messages.Message` in the earlier API's spelling.

    Args:
        role: ``"user"``, ``ChatRole.USER``, or any object whose ``.value`` is a role name.
        contents: The parts (strings become text).
        text: The message's text (instead of ``contents``).
        author_name: Optional author name.
        message_id: Stable id (assigned when the message enters a session if not given).
        created_at: Creation time.
        additional_properties: Free-form metadata.

    Raises:
        MessageFormatError: Unknown role or bad contents.
        ValueError: Both ``text`` and ``contents`` were given.
    """

    __slots__ = ()

    role: ChatRole  # pyright: ignore[reportIncompatibleVariableOverride] - a str that also has .value

    def __init__(
        self,
        role: Role | ChatRole | Any,
        contents: Sequence[Content | str] | str | None = None,
        *,
        text: str | None = None,
        author_name: str | None = None,
        message_id: str | None = None,
        created_at: datetime | None = None,
        additional_properties: dict[str, Any] | None = None,
    ) -> None:
        if text is not None:
            if contents is not None:
                raise ValueError("give a ChatMessage either text= or contents=, not both")
            contents = [TextContent(text)]
        super().__init__(
            cast(Role, role),  # Message turns a ChatRole or an enum member into plain text
            contents,
            author_name=author_name,
            message_id=message_id,
            created_at=created_at,
            additional_properties=additional_properties,
        )
        self.role = ChatRole(self.role)  # pyright: ignore[reportIncompatibleVariableOverride]

    @classmethod
    def from_message(cls, message: Message) -> ChatMessage:
        """``message`` as a ``ChatMessage`` (a shallow copy; ``message`` itself if it is one)."""
        if isinstance(message, ChatMessage):
            return message
        return _as_chat_message(Message.copy(message))

    def copy(self) -> ChatMessage:
        """A shallow copy, as a ``ChatMessage``."""
        return _as_chat_message(Message.copy(self))

    @classmethod
    def from_dict(cls, data: Any, *, path: str = "", checked: bool = False) -> ChatMessage:
        return cls.from_message(Message.from_dict(data, path=path, checked=checked))

    @classmethod
    def from_json(cls, text: str | bytes) -> ChatMessage:
        return cls.from_message(Message.from_json(text))

    def to_dict(self) -> dict[str, Any]:
        """The wire form, with the role as plain text."""
        out = super().to_dict()
        out["role"] = self.role.value
        return out

    def model_dump(self) -> dict[str, Any]:
        """The wire form (the same as :meth:`~agentkeep.messages.Message.to_dict`)."""
        return self.to_dict()

    def model_dump_json(self) -> str:
        """The wire form as JSON text."""
        return self.to_json()

    @classmethod
    def model_validate(cls, data: Any) -> ChatMessage:
        """Build from the wire form (what :meth:`model_dump` wrote).

        Raises:
            MessageFormatError: ``data`` is not a message.
        """
        return cls.from_dict(data)

    @classmethod
    def model_validate_json(cls, text: str | bytes) -> ChatMessage:
        """Build from JSON text in wire form.

        Raises:
            MessageFormatError: Invalid JSON or not a message.
        """
        return cls.from_json(text)


def _as_chat_message(plain: Message) -> ChatMessage:
    """A ``Message`` that nothing else holds (a fresh copy) turned into a ``ChatMessage``: the two
    classes have one layout (``ChatMessage`` adds no slots), and ``Message.copy`` always makes an
    exact ``Message``."""
    plain.__class__ = ChatMessage
    chat = cast(ChatMessage, plain)
    chat.role = ChatRole(chat.role)
    return chat


def as_chat_messages(messages: Iterable[Message]) -> list[ChatMessage]:
    """``messages`` as ``ChatMessage`` objects (shallow copies where needed), for earlier hooks."""
    return [ChatMessage.from_message(m) for m in messages]
