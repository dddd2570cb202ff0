"""The names the seeds' Python snippets import from ``agent_framework`` (read from the seeds in
``../shared/seeds/`` on 2026-12-01) are importable from ``agentkeep``: changing the import line is
enough for seeds 000 and 002. Seeds 003 and 004 show the framework's earlier API (``ChatAgent``,
``ChatMessage``, ``ChatClientProtocol``, the ``invoking``/``invoked`` context provider with
``Context``, ``InvokingContext``, ``InvokedContext``), which agentkeep does not offer yet."""

from __future__ import annotations

import importlib

import pytest

import agentkeep

SEED_IMPORTS = {
    "000": ["Agent", "InMemoryHistoryProvider"],
    "002": [
        "Agent",
        "CharacterEstimatorTokenizer",
        "SelectiveToolCallCompactionStrategy",
        "SlidingWindowStrategy",
        "SummarizationStrategy",
        "TokenBudgetComposedStrategy",
        "ToolResultCompactionStrategy",
        "TruncationStrategy",
        "apply_compaction",
    ],
}


@pytest.mark.parametrize(("seed", "names"), sorted(SEED_IMPORTS.items()))
def test_a_seeds_imports_resolve_from_the_top_level(seed: str, names: list[str]) -> None:
    module = importlib.import_module("agentkeep")
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == [], f"seed {seed} imports {missing} from agent_framework"
    assert set(names) <= set(agentkeep.__all__)
