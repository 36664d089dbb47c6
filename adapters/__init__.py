"""Integrations of prefixmon with agent frameworks, protocols and benchmarks."""
