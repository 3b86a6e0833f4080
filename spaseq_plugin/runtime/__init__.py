"""The runtime: the automaton run over graph events.

``nfa_runtime`` holds runs, selection strategies, windows and partitions;
``results`` projects matches onto SELECT or CONSTRUCT; ``engine`` is the
Python API (``Engine``), ``aio`` its asyncio face.
"""
