"""The ``agentkeep`` command (and ``python -m agentkeep``): the CLI of :mod:`agentkeep.cli`.

The command lives outside the CLI package so that, when the ``[cli]`` extra is not installed, it
says so in one line instead of a traceback.
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Run the command line; exit with status 1 and a hint when the ``[cli]`` extra is missing."""
    try:
        from .cli import main as run_cli
    except ImportError as exc:
        if "agentkeep[cli]" not in str(exc):
            raise
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
    run_cli()


if __name__ == "__main__":
    main()
