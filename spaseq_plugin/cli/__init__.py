"""The ``spaseq`` command line: ``main`` (run, explain, plugins, bench) and
``kb_commands`` (kb load, kb query)."""
