"""Compaction cost of every non-LLM strategy, agentkeep vs. the reference.

Histories of 1k / 10k / 100k messages in two shapes: **mixed** (~200-character user and assistant
text, every third turn an assistant message calling one or two tools at once, occasional
reasoning) and **tool-heavy** (an agent's tool loop: 40 % of turns call 1-3 tools one after the
other, each call answered by a result of 60-400 characters before the next). For each shape and
strategy, with settings that really compact:

* **cold**: ``apply_compaction`` on a fresh message list (build the index, compact, project);
  median of a few runs (fewer at 100k);
* **incremental** (agentkeep only): append one turn to an already-compacted ``MessageIndex`` and
  compact again; median over many turns.

The reference (``agent-framework-core``) is measured in the same run, in its own virtual
environment (``bench/.venv-ref``, created on first use), cold only, with a per-case time limit:
it re-annotates the whole list on every call and is quadratic, so a case over the limit prints
``> N s`` and the larger sizes of that strategy are skipped (``skipped``). The ``kept`` column is
the number of messages agentkeep's compacted history holds (cold run).

Run: ``.venv/bin/python bench/bench_compaction.py [--quick] [--no-reference] [--sizes 1000,10000]
[--shapes mixed,tool-heavy]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import inspect
import json
import statistics
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentkeep import FunctionCallContent, FunctionResultContent, Message, TextReasoningContent
from agentkeep.compaction import (
    CharacterEstimatorTokenizer,
    CompactionStrategy,
    CompactionTriggers,
    MessageIndex,
    PipelineCompactionStrategy,
    SelectiveToolCallCompactionStrategy,
    SlidingWindowCompactionStrategy,
    SlidingWindowStrategy,
    TokenBudgetComposedStrategy,
    ToolResultCompactionStrategy,
    TruncationStrategy,
    apply_compaction,
)

HERE = Path(__file__).resolve().parent
REF_VENV = HERE / ".venv-ref"
REF_PACKAGE = "agent-framework-core"
SIZES = (1_000, 10_000, 100_000)
SHAPES = ("mixed", "tool-heavy")
TOKENIZER = CharacterEstimatorTokenizer()

Spec = list[tuple[Any, ...]]


# The history is described as plain data so that both libraries build the same messages: these
# functions' source is also sent to the reference subprocess. They must stay self-contained.
def turn_spec(turn: int, shape: str = "mixed") -> list[tuple[Any, ...]]:
    """The messages of turn ``turn`` of a history of ``shape`` as ``(kind, ...)`` tuples."""
    text = (
        "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor "
        "incididunt ut labore et dolore magna aliqua. Ut enim ad minim veniam, quis nostrud "
        "exercitation ullamco laboris."
    )
    out: list[tuple[Any, ...]] = [("user", f"[{turn}] {text}")]
    if shape == "tool-heavy":
        if turn % 5 in (1, 3):  # 40 % of turns run a tool loop of 1-3 calls
            for step in range(1 + turn % 3):
                call_id, name = f"call_{turn}_{step}", ("get_weather", "search", "lookup")[step]
                out.append(("call", [(call_id, name, {"city": "Paris", "turn": turn, "step": step})]))
                size = 60 + (turn * 37 + step * 101) % 341  # 60-400 characters
                out.append(("result", call_id, (f"{name} {turn}.{step}: " + text * 4)[:size]))
        out.append(("assistant", f"[{turn}] {text}"))
        return out
    if turn % 7 == 3:
        out.append(("reasoning", f"Thinking about {turn}: {text[:120]}"))
    if turn % 3 == 2:
        calls = [(f"call_{turn}_{k}", "get_weather" if k == 0 else "search") for k in range(1 + turn % 2)]
        out.append(("call", [(call_id, name, {"city": "Paris", "turn": turn}) for call_id, name in calls]))
        for call_id, name in calls:
            out.append(("result", call_id, f"{name} for turn {turn}: sunny, 18 C. {text[:100]}"))
    out.append(("assistant", f"[{turn}] {text}"))
    return out


def history_spec(count: int, shape: str = "mixed") -> list[tuple[Any, ...]]:
    """Whole turns of ``shape`` until at least ``count`` messages."""
    out: list[tuple[Any, ...]] = []
    turn = 0
    while len(out) < count:
        out.extend(turn_spec(turn, shape))
        turn += 1
    return out


def _build(spec: Spec) -> list[Message]:
    out: list[Message] = []
    for item in spec:
        kind = item[0]
        if kind == "user" or kind == "assistant":
            out.append(Message(kind, item[1]))
        elif kind == "reasoning":
            out.append(Message("assistant", [TextReasoningContent(item[1])]))
        elif kind == "call":
            calls = [FunctionCallContent(call_id, name, args) for call_id, name, args in item[1]]
            out.append(Message("assistant", list(calls)))
        else:
            out.append(Message("tool", [FunctionResultContent(item[1], item[2])]))
    return out


def _turns_in(spec: Spec) -> int:
    return sum(1 for item in spec if item[0] == "user")


def _strategies(total_tokens: int) -> dict[str, Callable[[], CompactionStrategy]]:
    half = total_tokens // 2
    return {
        "truncation (tokens, to 1/2)": lambda: TruncationStrategy(half, half, TOKENIZER),
        "sliding window (20 groups)": lambda: SlidingWindowStrategy(keep_last_groups=20),
        "turn window (turns_exceed 4)": lambda: SlidingWindowCompactionStrategy(
            trigger=CompactionTriggers.turns_exceed(4)
        ),
        "tool result (keep 1)": lambda: ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
        "selective tool call (keep 1)": lambda: SelectiveToolCallCompactionStrategy(
            keep_last_tool_call_groups=1
        ),
        "pipeline (tool result + window)": lambda: PipelineCompactionStrategy(
            ToolResultCompactionStrategy(keep_last_tool_call_groups=1),
            SlidingWindowStrategy(keep_last_groups=20),
        ),
        "token budget (1/4, tool result)": lambda: TokenBudgetComposedStrategy(
            total_tokens // 4, TOKENIZER, [ToolResultCompactionStrategy(keep_last_tool_call_groups=1)]
        ),
    }


# Reference names for the same cases; None: the reference has no such strategy.
REF_CASES: dict[str, str | None] = {
    "truncation (tokens, to 1/2)": "truncation",
    "sliding window (20 groups)": "sliding",
    "turn window (turns_exceed 4)": None,
    "tool result (keep 1)": "tool_result",
    "selective tool call (keep 1)": "selective",
    "pipeline (tool result + window)": None,
    "token budget (1/4, tool result)": "budget",
}


def _cold_reps(size: int, quick: bool) -> int:
    if size <= 1_000:
        return 5 if quick else 15
    if size <= 10_000:
        return 3 if quick else 7
    return 2 if quick else 3


def _incremental_reps(quick: bool) -> int:
    return 50 if quick else 300


async def _cold_once(messages: list[Message], strategy: CompactionStrategy) -> tuple[float, int]:
    start = time.perf_counter()
    kept = await apply_compaction(messages, strategy=strategy, tokenizer=TOKENIZER)
    return time.perf_counter() - start, len(kept)


async def _incremental(spec: Spec, shape: str, strategy: CompactionStrategy, reps: int) -> float:
    index = MessageIndex(_build(spec), tokenizer=TOKENIZER)
    await strategy.compact(index)
    first_turn = _turns_in(spec)
    turns = [_build(turn_spec(first_turn + i, shape)) for i in range(reps + 5)]
    for turn in turns[:5]:  # warm up
        index.append(turn)
        await strategy.compact(index)
    samples: list[float] = []
    for turn in turns[5:]:
        start = time.perf_counter()
        index.append(turn)
        await strategy.compact(index)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1000.0


Results = dict[tuple[str, str], dict[int, tuple[float, float, int]]]
"""(shape, strategy) -> size -> (cold ms, incremental ms, messages kept)."""


def _measure_ours(shapes: list[str], sizes: list[int], quick: bool) -> Results:
    results: Results = {}
    for shape in shapes:
        for size in sizes:
            spec = history_spec(size, shape)
            total = MessageIndex(_build(spec), tokenizer=TOKENIZER).token_count
            for name, make in _strategies(total).items():
                print(f"agentkeep {shape} {name} @ {size:,} ...", file=sys.stderr)
                samples: list[float] = []
                kept = 0
                for _ in range(_cold_reps(size, quick)):
                    messages = _build(spec)
                    strategy = make()
                    gc.collect()
                    gc.disable()
                    try:
                        elapsed, kept = asyncio.run(_cold_once(messages, strategy))
                    finally:
                        gc.enable()
                    samples.append(elapsed)
                cold = statistics.median(samples) * 1000.0
                gc.collect()
                gc.disable()
                try:
                    incremental = asyncio.run(_incremental(spec, shape, make(), _incremental_reps(quick)))
                finally:
                    gc.enable()
                results.setdefault((shape, name), {})[size] = (cold, incremental, kept)
    return results


_REFERENCE_SCRIPT = textwrap.dedent(
    """
    import asyncio, gc, json, signal, statistics, sys, time
    from agent_framework import (
        CharacterEstimatorTokenizer, Content, Message, SelectiveToolCallCompactionStrategy,
        SlidingWindowStrategy, TokenBudgetComposedStrategy, ToolResultCompactionStrategy,
        TruncationStrategy, apply_compaction,
    )
    from agent_framework._compaction import (
        annotate_message_groups, annotate_token_counts, included_token_count,
    )
    from typing import Any

    %(spec)s

    TOK = CharacterEstimatorTokenizer()

    def build(spec):
        out = []
        for item in spec:
            kind = item[0]
            if kind in ("user", "assistant"):
                out.append(Message(role=kind, contents=[item[1]]))
            elif kind == "reasoning":
                out.append(Message(role="assistant", contents=[Content.from_text_reasoning(text=item[1])]))
            elif kind == "call":
                out.append(Message(role="assistant", contents=[
                    Content.from_function_call(call_id=c, name=n, arguments=a) for c, n, a in item[1]]))
            else:
                out.append(Message(role="tool", contents=[
                    Content.from_function_result(call_id=item[1], result=item[2])]))
        return out

    def make(case, total):
        if case == "truncation":
            return TruncationStrategy(max_n=total // 2, compact_to=total // 2, tokenizer=TOK)
        if case == "sliding":
            return SlidingWindowStrategy(keep_last_groups=20)
        if case == "tool_result":
            return ToolResultCompactionStrategy(keep_last_tool_call_groups=1)
        if case == "selective":
            return SelectiveToolCallCompactionStrategy(keep_last_tool_call_groups=1)
        return TokenBudgetComposedStrategy(token_budget=total // 4, tokenizer=TOK,
            strategies=[ToolResultCompactionStrategy(keep_last_tool_call_groups=1)])

    class Timeout(Exception):
        pass

    def on_alarm(signum, frame):
        raise Timeout()

    signal.signal(signal.SIGALRM, on_alarm)

    async def once(messages, strategy):
        start = time.perf_counter()
        await apply_compaction(messages, strategy=strategy, tokenizer=TOK)
        return time.perf_counter() - start

    def main():
        plan = json.loads(sys.argv[1])
        limit = plan["limit"]
        out = {"cases": {}}
        timed_out = set()
        for shape, size, reps in plan["sizes"]:
            spec = history_spec(size, shape)
            total = None
            for name in plan["cases"]:
                case = f"{shape}/{name}"
                if case in timed_out:  # a smaller size already hit the limit
                    out["cases"].setdefault(case, {})[str(size)] = -1
                    continue
                print(f"reference {case} @ {size:,} ...", file=sys.stderr, flush=True)
                began = time.perf_counter()
                samples = []
                try:
                    signal.setitimer(signal.ITIMER_REAL, limit)
                    if total is None:
                        counted = build(spec)
                        annotate_message_groups(counted)
                        annotate_token_counts(counted, tokenizer=TOK)
                        total = included_token_count(counted)
                    for _ in range(reps):
                        messages = build(spec)
                        strategy = make(name, total)
                        gc.collect(); gc.disable()
                        try:
                            samples.append(asyncio.run(once(messages, strategy)))
                        finally:
                            gc.enable()
                        if time.perf_counter() - began > limit / 2:
                            break
                except Timeout:
                    pass
                finally:
                    signal.setitimer(signal.ITIMER_REAL, 0)
                if samples:
                    out["cases"].setdefault(case, {})[str(size)] = statistics.median(samples) * 1000
                else:
                    timed_out.add(case)
                    out["cases"].setdefault(case, {})[str(size)] = None
        import agent_framework
        out["version"] = getattr(agent_framework, "__version__", "?")
        print(json.dumps(out))

    main()
    """
)


def _ensure_reference() -> Path:
    python = REF_VENV / "bin" / "python"
    if not python.exists():
        print("creating bench/.venv-ref with agent-framework-core (first run only) ...", file=sys.stderr)
        subprocess.run([sys.executable, "-m", "venv", str(REF_VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", REF_PACKAGE],
            check=True,
        )
    return python


def _reference(shapes: list[str], sizes: list[int], quick: bool, limit: float) -> dict[str, Any] | None:
    try:
        python = _ensure_reference()
    except (subprocess.CalledProcessError, OSError) as exc:
        print(f"reference unavailable: {exc}", file=sys.stderr)
        return None
    spec_source = inspect.getsource(turn_spec) + "\n\n" + inspect.getsource(history_spec)
    script = _REFERENCE_SCRIPT % {"spec": spec_source}
    cases = [case for case in REF_CASES.values() if case is not None]
    runs = [[shape, size, _cold_reps(size, quick)] for shape in shapes for size in sizes]
    plan = {"sizes": runs, "cases": cases, "limit": limit}
    # Safety net: every case is capped by `limit`; allow for building the histories as well.
    overall = limit * len(cases) * len(runs) + 120.0
    try:
        done = subprocess.run(
            [str(python), "-c", script, json.dumps(plan)],
            stdout=subprocess.PIPE,
            text=True,
            check=False,
            timeout=overall,
        )
    except subprocess.TimeoutExpired:
        print("reference run timed out", file=sys.stderr)
        return None
    if done.returncode != 0 or not done.stdout.strip():
        print("reference run failed (see its stderr above)", file=sys.stderr)
        return None
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _parse_sizes(text: str) -> list[int]:
    sizes: list[int] = []
    for part in text.split(","):
        part = part.strip().lower().replace("_", "")
        if part.endswith("k"):
            sizes.append(int(float(part[:-1]) * 1_000))
        elif part:
            sizes.append(int(part))
    return sizes


def _ms(value: float) -> str:
    return f"{value:9.3f} ms" if value < 10_000 else f"{value / 1000:9.2f} s "


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions, 10 s reference limit")
    parser.add_argument("--no-reference", action="store_true", help="skip the reference library")
    parser.add_argument(
        "--sizes",
        type=_parse_sizes,
        default=list(SIZES),
        help="comma-separated history sizes (default 1k,10k,100k)",
    )
    parser.add_argument(
        "--shapes",
        type=lambda text: [part.strip() for part in text.split(",") if part.strip()],
        default=list(SHAPES),
        help="comma-separated history shapes: mixed, tool-heavy (default both)",
    )
    parser.add_argument(
        "--ref-limit",
        type=float,
        default=None,
        help="seconds per reference case (default 60, 10 with --quick)",
    )
    args = parser.parse_args(argv)
    sizes: list[int] = sorted(args.sizes)
    shapes: list[str] = args.shapes
    unknown = [shape for shape in shapes if shape not in SHAPES]
    if unknown:
        parser.error(f"unknown shapes {unknown}; expected {', '.join(SHAPES)}")
    quick: bool = args.quick
    limit: float = args.ref_limit if args.ref_limit is not None else (10.0 if quick else 60.0)

    ours = _measure_ours(shapes, sizes, quick)
    ref = None if args.no_reference else _reference(shapes, sizes, quick, limit)
    ref_cases: dict[str, dict[str, float | None]] = {} if ref is None else ref["cases"]

    print("\nCompaction: cold = apply_compaction on a fresh history (index + compact + project), median;")
    print("incremental = append one turn to a compacted index and compact again, median (agentkeep only)")
    header = (
        f"{'shape':>10} | {'strategy':>32} | {'messages':>8} | {'kept':>6} | {'cold':>12} | "
        f"{'incremental':>12} | {'reference':>12} | {'ref/ours':>9}"
    )
    print(header)
    print("-" * len(header))
    for (shape, name), by_size in ours.items():
        ref_name = REF_CASES[name]
        for size in sizes:
            cold, incremental, kept = by_size[size]
            if ref is None or ref_name is None:
                ref_text, ratio = ("n/a" if ref_name is None else "-"), "-"
            else:
                theirs = ref_cases.get(f"{shape}/{ref_name}", {}).get(str(size))
                if theirs is not None and theirs < 0:
                    ref_text, ratio = "skipped", "-"
                elif theirs is None:
                    ref_text, ratio = f"> {limit:.0f} s", f"> {limit * 1000 / cold:.0f}x"
                else:
                    ref_text, ratio = _ms(theirs), f"{theirs / cold:8.1f}x"
            row = f"{shape:>10} | {name:>32} | {size:>8,} | {kept:>6,} | {_ms(cold)} | {_ms(incremental)}"
            print(f"{row} | {ref_text:>12} | {ratio:>9}")
    print()
    targets = [(10_000, 0, 30.0, "cold at 10k"), (100_000, 0, 300.0, "cold at 100k")]
    targets.append((10_000, 1, 1.0, "incremental per turn at 10k"))
    for shape in shapes:
        for size, column, bound, label in targets:
            if size not in sizes:
                continue
            worst_name, worst = max(
                ((name, v[size][column]) for (s, name), v in ours.items() if s == shape),
                key=lambda item: item[1],
            )
            verdict = "ok" if worst <= bound else "MISSED"
            print(
                f"target {label} ({shape}) <= {bound:g} ms: worst {worst:.3f} ms ({worst_name}) -> {verdict}"
            )
    if ref is not None:
        print(f"reference: agent-framework-core {ref.get('version', '?')} (per-case limit {limit:.0f} s)")


if __name__ == "__main__":
    main()
