"""GPM evaluators: the solutions of one GPM over one event graph.

``protocol`` is what the runtime asks of an evaluator; ``spectra`` is the
fast path (per-event summaries, vertically partitioned views, FILTERs as
closures over ``sparql_values``), ``oxigraph`` the exact fallback (one
SPARQL query per event and GPM), ``rdflib`` the same through rdflib's
engine, for comparison.
"""
