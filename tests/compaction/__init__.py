"""Tests for agentkeep.compaction."""
