"""Which chat client a command-line or server configuration names: a local GGUF model (the
packaged SmolLM2-135M-Instruct by default) or an OpenAI-compatible server."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from .base import ChatClient

__all__ = ["SupportsAclose", "SupportsLoad", "SupportsReadyCheck", "open_chat_client"]


@runtime_checkable
class SupportsLoad(Protocol):
    """A client that prepares something before its first call (the local model loads its weights;
    a server client without a model name asks the server which model it offers)."""

    async def load(self) -> None: ...


@runtime_checkable
class SupportsReadyCheck(Protocol):
    """A client that can tell whether it can answer now (a host's ``/readyz`` asks it)."""

    async def check_ready(self) -> None:
        """Return when the client can answer now.

        Raises:
            ModelUnavailableError: It cannot (the model is not loaded, the server does not answer).
        """
        ...


@runtime_checkable
class SupportsAclose(Protocol):
    """A client that holds resources to release (model memory, HTTP connections)."""

    async def aclose(self) -> None: ...


def open_chat_client(
    *,
    model_path: Path | None = None,
    base_url: str | None = None,
    api_model: str | None = None,
    max_tokens: int | None = None,
) -> ChatClient:
    """The chat client for these options (nothing is loaded or connected yet).

    Args:
        model_path: A local GGUF model file (default: the packaged SmolLM2-135M-Instruct).
        base_url: Use the OpenAI-compatible server at this URL instead of a local model.
        api_model: The model name to ask that server for (also selects the server client, with
            ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` from the environment).
        max_tokens: Upper bound on tokens per reply, for the local model.

    Raises:
        ValueError: A local model and a server were both asked for.
        ImportError: The client's optional dependencies are missing (names the extra).
    """
    if base_url is not None or api_model is not None:
        if model_path is not None:
            raise ValueError(
                "--model (a local file) and --base-url/--api-model (a server) exclude each other"
            )
        from .openai import OpenAIChatClient

        return OpenAIChatClient(api_model, base_url=base_url)
    from .local import LocalChatClient

    if max_tokens is None:
        return LocalChatClient(model_path)
    return LocalChatClient(model_path, max_tokens=max_tokens)
