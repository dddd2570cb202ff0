"""``agent_framework._sessions``: agentkeep's sessions, providers and session stores."""

from _absent import absent_names

from agentkeep.providers import *  # noqa: F403
from agentkeep.session_stores import *  # noqa: F403
from agentkeep.sessions import *  # noqa: F403
from agentkeep.state_types import *  # noqa: F403

__getattr__ = absent_names("agent_framework._sessions")
