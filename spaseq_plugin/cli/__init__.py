"""The ``spaseq`` command line: ``main`` (run, explain, plugins, bench) and
``kb_commands`` (kb load, kb query)."""


def main(argv: list[str] | None = None) -> int:
    """The ``spaseq`` command: takes a stop signal before it imports the command,
    and with it rdflib and pyoxigraph (cli/stopping.py)."""
    from .stopping import stopped, stopping_from_the_start
    try:
        with stopping_from_the_start():
            from .commands import main as command
            return command(argv)
    except KeyboardInterrupt as stop:
        return stopped(stop)
