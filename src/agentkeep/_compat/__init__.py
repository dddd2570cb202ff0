"""Compatibility in one place: call shapes of other generations of the API, adapted to the core's.

The core (clients, providers, the agent) has one strict signature per hook. Code written for the
seeds' earlier Python API, or the reference's way, calls or overrides other shapes; the modules
here turn those into the core's, each applied at one seam of the core:

* :mod:`~agentkeep._compat.client_calls`: the earlier ``get_response(messages=...,
  chat_options=...)`` call and the reference's ``_inner_get_response`` hook, applied by
  ``BaseChatClient.__init_subclass__`` and once to ``BaseChatClient`` itself
  (:mod:`agentkeep.clients.base`);
* :mod:`~agentkeep._compat.provider_hooks`: the earlier ``invoking`` / ``invoked`` context-provider
  hooks, applied by ``ContextProvider.__init_subclass__`` and the base class it inherits the
  earlier hooks from (:mod:`agentkeep.providers.context`).

Nothing here imports the packages it adapts (only the basic types, and theirs for type hints):
the core calls in, never the other way. To retire the layer, delete this package and its seams
(docs/architecture.md, "Compatibility").
"""

__all__: list[str] = []
