"""Private helpers every layer may use: bounded JSON walks, read-only views, trusted types, quoting, threads, signals, logging.

Nothing here knows about tools, rules or records; nothing here is public API.
"""
