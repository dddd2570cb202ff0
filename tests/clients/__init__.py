"""Tests of the chat clients that talk to real models (local llama.cpp and OpenAI-compatible)."""
