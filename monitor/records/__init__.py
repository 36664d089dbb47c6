"""Records: what an episode leaves behind, and every format it is written to or read from.

- :mod:`prefixmon.records.model`: ``EpisodeRecord``, ``ActionRecord``, the JSONL sink and readers
  (re-exported here, so ``from prefixmon.records import EpisodeRecord`` keeps working).
- :mod:`prefixmon.records.jsonlines`: bounded, line-numbered JSON Lines reading.
- :mod:`prefixmon.records.parquet`: the columnar export and its reader.
- :mod:`prefixmon.records.otlp`: records read back from OTLP traces.
- :mod:`prefixmon.records.redaction`: what records may hold of arguments and results.
- private: ``_writer`` (the durable file writer under every sink).

Records sit on the base layer only; the core writes them and analytics read them.
"""

from ..deprecation import forward_names
from . import model
from .model import *  # noqa: F403

__all__ = model.__all__

__getattr__ = forward_names(__name__, model)  # ``prefixmon.records`` was one module before 0.2.0
