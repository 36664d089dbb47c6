"""The rule language: what a tool requires, and how a spec file says it.

- :mod:`prefixmon.rules.spec`: the rule model (``ToolSpec``, ``Ref``, ``Precondition``, ``Grounded``, effects).
- :mod:`prefixmon.rules.specfile`: spec files (YAML/JSON, schema ``spec/1``), loaded without fetching anything.
- :mod:`prefixmon.rules.grounding`: how a value counts as seen (value forms, words, dates).
- :mod:`prefixmon.rules.observed`: rules over the state as last observed, when there is no replica (DESIGN §2.1).
- private: ``_cel`` (the CEL subset), ``_coercion`` and ``_validation`` (arguments against JSON Schema),
  ``_compile`` (spec-file rules compiled into ``ToolSpec`` fields).

The rules sit on the base layer only; the core (toolset, state, predicate) reads them.
"""

__all__: tuple[str, ...] = ()
