"""Per-turn framework overhead and session (de)serialization, agentkeep vs. the reference.

Prints, for 100 / 1k / 10k / 100k stored messages, the median time of one ``agent.run`` with a
scripted client (replies "Done." at once, so only framework work is timed) and in-memory history,
and the same for ``agent-framework-core`` (the reference) measured in the same run, in its own
virtual environment (``bench/.venv-ref``, created on first use; the reference is never installed
into the project's environment). Then, for a session of 10k messages: ``to_dict`` + JSON dump and
JSON load + ``from_dict``.

Run: ``make bench`` (or ``.venv/bin/python bench/bench_turn.py [--quick] [--no-reference]``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from agentkeep import AgentSession, InMemoryHistoryProvider, Message
from agentkeep.compaction import SlidingWindowStrategy
from agentkeep.testing import ScriptedChatClient

HERE = Path(__file__).resolve().parent
REF_VENV = HERE / ".venv-ref"
SIZES = (100, 1_000, 10_000, 100_000)
SESSION_SIZE = 10_000  # messages in the (de)serialized session
REF_PACKAGE = "agent-framework-core"
TEXT = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor incididunt ut labore. "


def _history(count: int) -> list[Message]:
    return [Message("user" if i % 2 == 0 else "assistant", [f"{i} {TEXT}"]) for i in range(count)]


def _reps(size: int, quick: bool) -> int:
    base = {100: 400, 1_000: 400, 10_000: 300, 100_000: 200}[size]
    return max(20, base // 4) if quick else base


def _median_ms(samples: Sequence[float]) -> float:
    return statistics.median(samples) * 1000.0


async def _turn_agentkeep(size: int, reps: int, *, compaction: bool = False) -> tuple[float, int]:
    """Median ms of one run, and how many messages the last request sent."""
    provider = InMemoryHistoryProvider()
    client = ScriptedChatClient(lambda _messages: "Done.")
    agent = client.as_agent(
        "You are a helpful assistant.",
        context_providers=[provider],
        compaction_strategy=SlidingWindowStrategy(keep_last_groups=40) if compaction else None,
    )
    session = agent.create_session()
    state = provider.get_state(session)
    state.messages.extend(_history(size))
    for _ in range(10):  # warm up
        await agent.run("continue", session=session)
    samples: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for _ in range(reps):
            start = time.perf_counter()
            await agent.run("continue", session=session)
            samples.append(time.perf_counter() - start)
    finally:
        gc.enable()
    return _median_ms(samples), len(client.calls[-1])


def _time(func: Callable[[], object], reps: int) -> float:
    samples: list[float] = []
    for _ in range(reps):
        start = time.perf_counter()
        func()
        samples.append(time.perf_counter() - start)
    return _median_ms(samples)


def _session_agentkeep(size: int, reps: int) -> tuple[float, float, float, int]:
    provider = InMemoryHistoryProvider()
    session = AgentSession()
    provider.get_state(session).messages.extend(_history(size))
    dump_ms = _time(lambda: msgspec.json.encode(session.to_dict()), reps)
    payload = msgspec.json.encode(session.to_dict())
    load_ms = _time(lambda: AgentSession.from_json(payload), reps)  # JSON load + from_dict

    def load_and_read() -> None:
        restored = AgentSession.from_json(payload)
        provider.get_state(restored)

    read_ms = _time(load_and_read, max(3, reps // 3))
    return dump_ms, load_ms, read_ms, len(payload)


_REFERENCE_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, statistics, sys, time
    from agent_framework import (
        Agent, AgentSession, BaseChatClient, ChatResponse, InMemoryHistoryProvider, Message,
    )

    TEXT = %(text)r

    class DoneClient(BaseChatClient):
        async def _respond(self):
            return ChatResponse(messages=[Message(role="assistant", contents=["Done."])])

        def _inner_get_response(self, *, messages, stream, options, **kwargs):
            return self._respond()

    def history(count):
        return [Message(role="user" if i %% 2 == 0 else "assistant", contents=[f"{i} {TEXT}"])
                for i in range(count)]

    async def turn(size, reps):
        agent = Agent(client=DoneClient(), instructions="You are a helpful assistant.",
                      context_providers=[InMemoryHistoryProvider()])
        session = agent.create_session()
        session.state.setdefault("in_memory", {})["messages"] = history(size)
        for _ in range(2):
            await agent.run("continue", session=session)
        samples = []
        gc.collect(); gc.disable()
        for _ in range(reps):
            start = time.perf_counter()
            await agent.run("continue", session=session)
            samples.append(time.perf_counter() - start)
        gc.enable()
        return statistics.median(samples) * 1000

    def timed(func, reps):
        samples = []
        for _ in range(reps):
            start = time.perf_counter(); func(); samples.append(time.perf_counter() - start)
        return statistics.median(samples) * 1000

    def sessions(size, reps):
        session = AgentSession()
        session.state["in_memory"] = {"messages": history(size)}
        dump = timed(lambda: json.dumps(session.to_dict()), reps)
        payload = json.dumps(session.to_dict())
        load = timed(lambda: AgentSession.from_dict(json.loads(payload)), reps)
        return dump, load, len(payload.encode())

    async def main():
        plan = json.loads(sys.argv[1])
        out = {"turn": {}}
        for size, reps in plan["turn"]:
            out["turn"][str(size)] = await turn(size, reps)
        out["session"] = sessions(plan["session_size"], plan["session_reps"])
        import agent_framework
        out["version"] = getattr(agent_framework, "__version__", "?")
        print(json.dumps(out))

    asyncio.run(main())
    """
)


def _ensure_reference() -> Path | None:
    python = REF_VENV / "bin" / "python"
    if not python.exists():
        print("creating bench/.venv-ref with agent-framework-core (first run only) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(REF_VENV)], check=True)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                REF_PACKAGE,
            ],
            check=True,
        )
    return python


def _reference(quick: bool) -> dict[str, object] | None:
    try:
        python = _ensure_reference()
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"reference unavailable: {exc}", file=sys.stderr)
        return None
    assert python is not None
    # The reference re-reads the whole history every turn, so large sizes get few repetitions.
    reps = {100: 200, 1_000: 60, 10_000: 10, 100_000: 3}
    plan = {
        "turn": [[size, max(3, reps[size] // (4 if quick else 1))] for size in SIZES],
        "session_size": SESSION_SIZE,
        "session_reps": 3 if quick else 5,
    }
    done = subprocess.run(
        [str(python), "-c", _REFERENCE_SCRIPT % {"text": TEXT}, json.dumps(plan)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        print(f"reference run failed:\n{done.stderr[-2000:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference library")
    args = parser.parse_args(argv)

    ours = {size: asyncio.run(_turn_agentkeep(size, _reps(size, args.quick)))[0] for size in SIZES}
    compacted = {
        size: asyncio.run(_turn_agentkeep(size, _reps(size, args.quick), compaction=True)) for size in SIZES
    }
    dump_ms, load_ms, read_ms, payload_bytes = _session_agentkeep(SESSION_SIZE, 5 if args.quick else 15)
    ref = None if args.no_reference else _reference(args.quick)

    print("\nPer-turn framework overhead: median time of one agent.run (scripted client, in-memory history)")
    print(f"{'stored messages':>16} | {'agentkeep':>12} | {'reference':>12} | {'ref/ours':>9}")
    print("-" * 60)
    for size in SIZES:
        ref_ms = None if ref is None else float(ref["turn"][str(size)])  # type: ignore[index]
        ratio = f"{ref_ms / ours[size]:8.0f}x" if ref_ms else "-"
        ref_text = f"{ref_ms:9.3f} ms" if ref_ms else "-"
        print(f"{size:>16,} | {ours[size]:9.3f} ms | {ref_text:>12} | {ratio:>9}")
    print(f"agentkeep turn(100k) / turn(100) = {ours[100_000] / ours[100]:.2f}  (target <= 1.5)")
    print(f"agentkeep turn at 10k = {ours[10_000]:.3f} ms  (target <= 0.5 ms)")

    print(
        "\nPer-turn with compaction_strategy=SlidingWindowStrategy(keep_last_groups=40) "
        "(the request is compacted before the model call; agentkeep only)"
    )
    print(f"{'stored messages':>16} | {'agentkeep':>12} | {'sent':>6}")
    print("-" * 42)
    for size in SIZES:
        print(f"{size:>16,} | {compacted[size][0]:9.3f} ms | {compacted[size][1]:>6}")
    print(f"agentkeep compacted turn(100k) / turn(100) = {compacted[100_000][0] / compacted[100][0]:.2f}")

    print(f"\nSession with {SESSION_SIZE:,} messages (JSON payload, median)")
    print(f"{'operation':>34} | {'agentkeep':>12} | {'reference':>12} | {'ref/ours':>9}")
    print("-" * 78)
    ref_session = None if ref is None else ref["session"]
    rows = [
        ("to_dict + JSON dump", dump_ms, None if ref_session is None else ref_session[0]),  # type: ignore[index]
        ("JSON load + from_dict", load_ms, None if ref_session is None else ref_session[1]),  # type: ignore[index]
    ]
    for label, mine, theirs in rows:
        ratio = f"{float(theirs) / mine:8.0f}x" if theirs else "-"
        theirs_text = f"{float(theirs):9.3f} ms" if theirs else "-"
        print(f"{label:>34} | {mine:9.3f} ms | {theirs_text:>12} | {ratio:>9}")
    print(f"{'load + from_dict + first typed read':>34} | {read_ms:9.3f} ms |")
    ref_bytes = "" if ref_session is None else f" (reference: {ref_session[2]:,} bytes)"  # type: ignore[index]
    print(f"payload size: {payload_bytes:,} bytes{ref_bytes}")
    if ref is not None:
        print(f"reference: agent-framework-core {ref.get('version', '?')}")


if __name__ == "__main__":
    main()
