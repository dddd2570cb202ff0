"""``python -m agentkeep.cli``: the same as the ``agentkeep`` console script."""

from . import main

main()
