"""What the runtime asks of a GPM evaluator, and the shapes of its answers."""

from __future__ import annotations

from typing import Iterable, Mapping, Protocol, Sequence

import pyoxigraph as ox

from ..events import Event
from ..language.gpm import GpmPattern

Term = ox.NamedNode | ox.BlankNode | ox.Literal | ox.Triple
Solution = dict[str, Term]


def term_text(term: Term) -> str:
    """A term in N-Triples and SPARQL syntax: what VALUES, TSV and the checkpoint
    tables hold.  (pyoxigraph's ``str()`` of a triple term leaves out the ``<<( )>>``
    around it, though not around the triple terms nested in it.)"""
    return f"<<( {term} )>>" if type(term) is ox.Triple else str(term)


class GpmEvaluator(Protocol):
    """Evaluates GPMs on events; the engine's only way to match a pattern."""

    def evaluate(self, gpm: GpmPattern, event: Event,
                 mappings: Sequence[Mapping[str, Term]]) -> list[list[Solution]]:
        """For each mapping, the solutions of ``gpm`` on ``event`` compatible with it.

        An evaluator may also offer ``evaluate_one(gpm, event, mu)``: the
        solutions compatible with a run's whole mapping, answered so cheaply
        that the runtime calls it per run without memoising (see :mod:`.spectra`).
        Its solutions bind what the GPM binds (the runtime adds them to μ);
        values of μ that only a FILTER reads need not be repeated in them.  An
        evaluator that also offers ``comparisons(gpm)`` takes a fourth argument,
        ``holds``: one of those comparisons, known to hold, need not be checked.

        A solution is a ``dict`` (``Solution``), not any mapping: the compiled
        runtime reads solutions as dicts (``partition_keys``, for one).

        An evaluator may also offer ``limit_solutions(most)``, which the runtime
        calls with its cap on runs (``--max-runs``; ``None``: none): each solution
        may become a run, and a product inside one GPM (``?b :kind "b" . ?c :kind
        "b"`` over 3,000 such triples: 9 million) would otherwise be made whole
        before any limit sees it.  Such an evaluator makes no more than about
        ``most`` solutions of a GPM on one event, and when it had to stop short it
        raises :class:`TooManySolutions` with what it made: the answers it would
        have returned, each cut short.

        And ``limit_steps(most)``, which the runtime calls with ``--max-join-steps``:
        a join whose FILTER rejects almost everything makes few solutions for much
        work (two triple patterns through one hub of 200,000 edges each way: 4·10^10
        combinations tested, hours, for no solution).  Such an evaluator stops a
        GPM's evaluation on one event after about ``most`` join steps and raises
        :class:`TooManySolutions` with what it made and ``steps`` set.

        And ``hold_summaries(hold)``: a negation guard asks about every buffered
        event once per run, and the runtime turns this on for the rest of such a
        batch, so that an evaluator keeping per-event work for the last few events
        only keeps it for every event asked about until ``hold_summaries(False)``.
        """


class TooManySolutions(Exception):
    """A GPM's solutions on one event passed the evaluator's ``limit_solutions``,
    or (``steps``: that limit) its join passed ``limit_steps``.  ``solutions`` is
    what the call would have returned (a list of solutions, or a list of them per
    mapping), made from the solutions kept before it stopped."""

    def __init__(self, solutions: list, steps: int | None = None):
        super().__init__()
        self.solutions = solutions
        self.steps = steps


def gather(pairs: Iterable[tuple[int, Solution]], count: int, most: int | None) -> list[list[Solution]]:
    """The solutions of each of ``count`` mappings, from ``(mapping index, solution)``
    pairs, at most ``most`` per mapping (``None``: all).  When a mapping had more,
    the rest of the pairs are still read (they may belong to other mappings, unless
    there is just one) and :class:`TooManySolutions` carries the lists."""
    results: list[list[Solution]] = [[] for _ in range(count)]
    cut = False
    for index, solution in pairs:
        found = results[index]
        if most is not None and len(found) >= most:
            cut = True
            if count == 1:
                break
            continue
        found.append(solution)
    if cut:
        raise TooManySolutions(results)
    return results


def gather_shared(solutions: Iterable[Solution], count: int, most: int | None) -> list[list[Solution]]:
    """``gather`` for solutions that answer each of ``count`` mappings alike (a query
    with no injected bindings): a copy of the list for each."""
    try:
        found = gather(((0, solution) for solution in solutions), 1, most)[0]
    except TooManySolutions as cut:
        raise TooManySolutions([list(cut.solutions[0]) for _ in range(count)]) from None
    return [list(found) for _ in range(count)]
