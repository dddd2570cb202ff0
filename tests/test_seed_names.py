"""Every name the seeds' Python snippets import from ``agent_framework`` is importable from
``agentkeep``, so a seed example runs after changing only its import line.

The names were read from the seeds in ``../shared/seeds/`` on 2026-12-01 and are listed here, so
a clean clone without the seeds still checks them; when the seeds are present, the test also
reads them again and checks the list is complete. Names of other vendors' SDKs (Azure
credentials, cloud clients) come from other packages and are not listed.
"""

from __future__ import annotations

import importlib

import pytest

import agentkeep
from tests.threads import seeds

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
    "003": ["ChatAgent", "ChatMessage"],
    "004": [
        "ChatAgent",
        "ChatClientProtocol",
        "Context",
        "ContextProvider",
        "InvokedContext",
        "InvokingContext",
    ],
}


@pytest.mark.parametrize(("seed", "names"), sorted(SEED_IMPORTS.items()))
def test_a_seeds_imports_resolve_from_the_top_level(seed: str, names: list[str]) -> None:
    module = importlib.import_module("agentkeep")
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == [], f"seed {seed} imports {missing} from agent_framework"
    assert set(names) <= set(agentkeep.__all__)


def test_the_list_holds_what_the_seeds_import() -> None:
    numbers = seeds.seed_numbers()
    if not numbers:
        pytest.skip(f"the seeds are not in {seeds.SEEDS_DIR}")
    for number in numbers:
        text = seeds.seed_text(number)
        assert text is not None
        assert seeds.imported_names(text) == set(SEED_IMPORTS.get(number, [])), f"seed {number}"
