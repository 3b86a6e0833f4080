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

from ..events import Time
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


def automaton_svg(automaton: Automaton) -> str:
    """The automaton as a self-contained SVG picture (no Graphviz needed).

    States stand left to right in creation order (the SEQ order); forward
    edges arc above the row, loops (Kleene iterations) sit above their state.
    """
    from html import escape

    gap, radius, top = 170, 30, 190
    states = automaton.states
    x = {s.id: 70 + i * gap for i, s in enumerate(states)}
    width = 140 + gap * (len(states) - 1)
    forward = [(s, e) for s in states for e in s.edges if not e.loop]
    height = top + 110
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="Helvetica, Arial, sans-serif" font-size="12">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" '
             'markerHeight="8" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"/></marker></defs>',
             f'<rect width="{width}" height="{height}" fill="white"/>']
    for n, (source, edge) in enumerate(forward):
        x1, x2 = x[source.id] + radius, x[edge.target.id] - radius
        lift = 40 + 28 * (abs(x2 - x1) // gap) + 10 * (n % 2)
        mid = (x1 + x2) / 2
        label = f"{edge.atom.label()} {edge.strategy}"
        if edge.guards:
            label += " !" + ",".join(g.name for g in edge.guards)
        parts.append(f'<path d="M{x1},{top} Q{mid},{top - 2 * lift} {x2},{top}" fill="none" '
                     f'stroke="black" marker-end="url(#arrow)"/>')
        parts.append(f'<text x="{mid}" y="{top - lift - 4}" text-anchor="middle">{escape(label)}</text>')
    for state in states:
        cx = x[state.id]
        for edge in state.edges:
            if edge.loop:
                parts.append(f'<path d="M{cx - 12},{top + radius - 4} C{cx - 40},{top + radius + 50} '
                             f'{cx + 40},{top + radius + 50} {cx + 12},{top + radius - 4}" fill="none" '
                             f'stroke="black" marker-end="url(#arrow)"/>')
                parts.append(f'<text x="{cx}" y="{top + radius + 58}" text-anchor="middle">'
                             f'{escape(edge.atom.label())}+ {edge.strategy}</text>')
        parts.append(f'<circle cx="{cx}" cy="{top}" r="{radius}" fill="#eef3fb" stroke="black"/>')
        if state.accepting:
            parts.append(f'<circle cx="{cx}" cy="{top}" r="{radius - 5}" fill="none" stroke="black"/>')
        parts.append(f'<text x="{cx}" y="{top + 4}" text-anchor="middle" font-weight="bold">x{state.id}</text>')
        if state.final_guards:
            parts.append(f'<text x="{cx}" y="{top - radius - 6}" text-anchor="middle">'
                         f'{escape("unless " + ",".join(g.name for g in state.final_guards))}</text>')
    start = x[automaton.initial.id]
    parts.append(f'<path d="M{start - radius - 35},{top} L{start - radius},{top}" stroke="black" '
                 f'marker-end="url(#arrow)"/>')
    window = "no window" if automaton.window is None else \
        f"WITHIN {automaton.window} s" + (" TUMBLING" if automaton.tumbling else "")
    parts.append(f'<text x="10" y="18">NFA_scep, {escape(window)}</text>')
    parts.append("</svg>")
    return "\n".join(parts)
