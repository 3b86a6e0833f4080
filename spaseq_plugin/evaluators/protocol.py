"""What the runtime asks of a GPM evaluator, and the shapes of its answers."""

from __future__ import annotations

from typing import Mapping, Protocol, Sequence

import pyoxigraph as ox

from ..events import Event
from ..language.gpm import GpmPattern

Term = ox.NamedNode | ox.BlankNode | ox.Literal
Solution = dict[str, Term]


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
        """
