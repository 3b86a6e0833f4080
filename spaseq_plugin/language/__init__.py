"""The language: SPASEQ text -> syntax tree -> checked query -> automaton.

``parser`` reads the skeleton with the lark grammar ``spaseq.lark`` into
``syntax`` objects; ``gpm`` analyses each GPM body (what it binds, what it
reads from earlier events, its GRAPH clauses); ``filters`` compiles FILTER
expressions to Python closures with SPARQL semantics; ``compiler`` checks
the query and builds the ``nfa`` automaton (the paper's NFA_scep).
"""
