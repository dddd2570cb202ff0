"""Runs every example in order: the seeds' walkthroughs on the scripted client (``make demo``).

1. multi_turn_memory  - seed 000: in-memory chat history remembers across turns
2. shared_session     - seed 001: two agents share one session and its history
3. persist_session    - seed 000: a session saved as JSON, restored and continued
4. audit_history      - seeds 000/001: an audit history records injected calendar context
5. user_info_memory   - seed 004: a memory provider extracts name and age, injects instructions
6. todo_provider      - seed 001: a to-do list provider with tools whose effects live in the session

Exits with status 1 if any example fails (each one asserts what it shows).
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
from collections.abc import Awaitable, Callable

import audit_history
import multi_turn_memory
import persist_session
import shared_session
import todo_provider
import user_info_memory

EXAMPLES: list[tuple[str, Callable[[], Awaitable[None]]]] = [
    ("multi_turn_memory", multi_turn_memory.main),
    ("shared_session", shared_session.main),
    ("persist_session", persist_session.main),
    ("audit_history", audit_history.main),
    ("user_info_memory", user_info_memory.main),
    ("todo_provider", todo_provider.main),
]


async def main() -> int:
    failed: list[str] = []
    started = time.perf_counter()
    for number, (name, run) in enumerate(EXAMPLES, start=1):
        print(f"\n=== {number}. {name} ".ljust(72, "="))
        try:
            await run()
        except Exception:
            traceback.print_exc()
            failed.append(name)
            print(f"--- {name}: FAILED")
        else:
            print(f"--- {name}: ok")
    elapsed = time.perf_counter() - started
    passed = len(EXAMPLES) - len(failed)
    print(f"\n{passed}/{len(EXAMPLES)} examples passed in {elapsed:.2f}s")
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
