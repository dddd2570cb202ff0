"""Shared fixtures for the agentkeep test suite."""
