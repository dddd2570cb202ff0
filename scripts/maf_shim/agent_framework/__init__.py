"""``agent_framework`` as names of agentkeep's: the shim the framework's own tests run against.

Names only, no behaviour: every name the tests import comes from agentkeep, or is an
:class:`~_absent.Absent` placeholder when agentkeep has no counterpart (see ``scripts/maf_suite.py``).
"""

from _absent import absent_names

from agentkeep import *  # noqa: F403
from agentkeep.compaction import *  # noqa: F403

__getattr__ = absent_names("agent_framework")
