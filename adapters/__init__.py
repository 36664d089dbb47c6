"""Integrations of prefixmon with agent frameworks, protocols and benchmarks."""

__all__ = ()
