"""The automaton NFA_scep (paper section 6): states, and edges labelled
(streams, operator, pattern).

The runtime (``runtime.py``) executes it; the compiler (``compiler.py``)
builds it; ``explain`` prints it.  Here is only the structure.

A state stands for "the positive atoms up to this one have matched".  An
edge carries the atom to match next, the selection strategy that links it to
the previous atom (the operator written just before the atom), and the
negations (``guards``) that must have no match strictly between the two.
Optional atoms ``B?`` become two edges (take ``B``, or skip it with ``B``
as a guard); a Kleene atom's state has a loop edge for its next iteration.
A state is accepting when the rest of the sequence can be skipped; its
``final_guards`` are trailing negations, checked until the window closes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .events import Time
from .gpm import GpmPattern
from .syntax import STRATEGY_NAMES

SINGLE, CONJUNCTION, DISJUNCTION = "single", "and", "or"


@dataclass(eq=False)
class AtomMatcher:
    """What one edge matches: one GPM, or a conjunction/disjunction of GPMs.

    ``index`` is the atom's position in the SEQ expression; conjunction
    operands are in evaluation order (an operand whose FILTER reads a
    variable that another operand binds comes after it).
    """

    kind: str
    gpms: tuple[GpmPattern, ...]
    index: int
    streams: frozenset[str] = frozenset()

    def __post_init__(self):
        self.streams = frozenset().union(*(g.streams for g in self.gpms))

    def label(self) -> str:
        names = [g.name for g in self.gpms]
        if self.kind == CONJUNCTION:
            return "(" + " & ".join(names) + ")"
        if self.kind == DISJUNCTION:
            return "(" + " | ".join(names) + ")"
        return names[0]


@dataclass(eq=False)
class Edge:
    atom: AtomMatcher
    strategy: str                      # , ; :
    target: "State"
    guards: tuple[GpmPattern, ...] = ()
    loop: bool = False                 # a Kleene iteration edge
    index: int = 0                     # position in its source state's edges

    def describe(self) -> str:
        streams = ", ".join(sorted(self.atom.streams))
        text = f"--[{self.atom.label()}{'+' if self.loop else ''} on {{{streams}}} | " \
               f"{self.strategy} {STRATEGY_NAMES[self.strategy]}]--> x{self.target.id}"
        if self.guards:
            text += "  unless " + ", ".join(g.name for g in self.guards) + " between"
        return text


@dataclass(eq=False)
class State:
    id: int
    label: str
    edges: list[Edge] = field(default_factory=list)
    accepting: bool = False
    final_guards: tuple[GpmPattern, ...] = ()
    kleene_atom: int | None = None     # the SEQ index of the Kleene atom this state loops on

    @property
    def waits_on(self) -> frozenset[str]:
        return frozenset().union(*(e.atom.streams for e in self.edges)) if self.edges else frozenset()


@dataclass(eq=False)
class Automaton:
    initial: State
    states: list[State]
    window: Time | None
    tumbling: bool

    def describe(self) -> str:
        """The automaton as text, one state per paragraph."""
        lines = []
        if self.window is None:
            lines.append("window: none (runs live until the input ends)")
        else:
            lines.append(f"window: {self.window:g} s" + (" tumbling" if self.tumbling else " (span)"))
        for state in self.states:
            flags = []
            if state is self.initial:
                flags.append("initial: a run starts at every event matching an edge")
            if state.accepting:
                flags.append("accepting" + (
                    " once no " + ", ".join(g.name for g in state.final_guards)
                    + " occurs before the window closes" if state.final_guards else ""))
            lines.append(f"x{state.id} [{state.label}]" + (" " + "; ".join(flags) if flags else ""))
            for edge in state.edges:
                lines.append("  " + edge.describe())
        return "\n".join(lines)

    def to_dot(self) -> str:
        """The automaton in Graphviz dot."""
        out = ["digraph nfa_scep {", "  rankdir=LR;", '  node [shape=circle, fontname="Helvetica"];']
        for state in self.states:
            shape = "doublecircle" if state.accepting else "circle"
            label = f"x{state.id}\\n{state.label}"
            if state.final_guards:
                label += "\\nunless " + ",".join(g.name for g in state.final_guards)
            out.append(f'  x{state.id} [shape={shape}, label="{label}"];')
        out.append('  start [shape=point];')
        out.append(f"  start -> x{self.initial.id};")
        for state in self.states:
            for edge in state.edges:
                label = f"{edge.atom.label()}{'+' if edge.loop else ''} {edge.strategy}"
                if edge.guards:
                    label += "\\n!" + ",!".join(g.name for g in edge.guards)
                out.append(f'  x{state.id} -> x{edge.target.id} [label="{label}"];')
        out.append("}")
        return "\n".join(out)
