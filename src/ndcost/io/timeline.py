"""When each micro-batch runs where: a pipeline's events, with the steady state aggregated.

:func:`pipeline_timeline` simulates a 1F1B or GPipe pipeline event by event. A step of millions of
micro-batches cannot be drawn (or simulated) one micro-batch at a time, and nothing in its middle
differs from one micro-batch to the next: :func:`bounded_timeline` simulates the first and last few
micro-batches of every stage exactly (warm-up, the start and end of the steady state, cool-down) and
stands one band per stage for the micro-batches between, each taking the steady state's period -- so
what it draws is bounded by the pipeline's depth, never by the number of micro-batches.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["pipeline_timeline", "bounded_timeline", "Timeline", "EDGE_MICRO_BATCHES"]

#: Micro-batches simulated beyond the pipeline's depth at each end of a long step.
EDGE_MICRO_BATCHES = 4


def _orders(p: int, micro_batches: int, schedule: str) -> list[list[tuple[str, int]]]:
    orders = []
    for s in range(p):
        if schedule == "gpipe":
            order = [("F", i) for i in range(micro_batches)] + [("B", i) for i in range(micro_batches)]
        else:
            warm = min(p - s - 1, micro_batches)
            order = [("F", i) for i in range(warm)]
            f, b = warm, 0
            while b < micro_batches:
                if f < micro_batches:
                    order.append(("F", f))
                    f += 1
                order.append(("B", b))
                b += 1
        orders.append(order)
    return orders


def pipeline_timeline(forward: Sequence[float], backward: Sequence[float], micro_batches: int,
                      schedule: str = "1f1b") -> list[tuple[int, int, str, float, float]]:
    """When each micro-batch's forward and backward run on each stage: (stage, micro-batch, "F"/"B", start, end).

    Event simulation of 1F1B (warm-up forwards, one-forward-one-backward, cool-down;
    Narayanan et al. 2021 §2.2) or GPipe (all forwards, then all backwards), with
    each stage waiting for the activation (forward) or gradient (backward) of its
    neighbour. Interleaved and zero-bubble schedules are drawn as 1F1B. Its cost grows with
    *micro_batches* (see :func:`bounded_timeline`).
    """
    p = len(forward)
    orders = _orders(p, micro_batches, schedule)
    done: dict[tuple[str, int, int], float] = {}
    free = [0.0] * p
    position = [0] * p
    events = []
    remaining = sum(len(o) for o in orders)
    while remaining:
        progressed = False
        for s in range(p):
            if position[s] >= len(orders[s]):
                continue
            op, i = orders[s][position[s]]
            dep = ("F", s - 1, i) if op == "F" and s > 0 else (("B", s + 1, i) if op == "B" and s < p - 1 else None)
            if op == "B" and s == p - 1:
                dep = ("F", s, i)
            if dep is not None and dep not in done:
                continue
            start = max(free[s], done.get(dep, 0.0) if dep else 0.0)
            end = start + (forward[s] if op == "F" else backward[s])
            done[(op, s, i)] = end
            free[s] = end
            events.append((s, i, op, start, end))
            position[s] += 1
            remaining -= 1
            progressed = True
        if not progressed:  # pragma: no cover - the orders above cannot deadlock
            raise RuntimeError("pipeline timeline deadlocked")
    return events


@dataclass(frozen=True)
class Timeline:
    """Events to draw, and the steady-state bands standing for the micro-batches not drawn one by one.

    Attributes:
        events: (stage, micro-batch, "F"/"B", start, end), micro-batches numbered as in the whole step.
        bands: (stage, start, end, micro-batches): per stage, the steady state between the drawn edges.
        micro_batches: The step's micro-batches.
        drawn: How many of them are drawn one by one (the rest are in the bands).
    """

    events: tuple[tuple[int, int, str, float, float], ...]
    bands: tuple[tuple[int, float, float, int], ...]
    micro_batches: int
    drawn: int


def bounded_timeline(forward: Sequence[float], backward: Sequence[float], micro_batches: int,
                     schedule: str = "1f1b", edge: int = EDGE_MICRO_BATCHES) -> Timeline:
    """The step's pipeline with at most ``2 * (stages + edge)`` micro-batches simulated, whatever *micro_batches*.

    The micro-batches past that run in the steady state, one every period of the slowest stage (its
    forward plus backward; under GPipe its forward, then its backward): every stage is cut at the same
    point of its own order -- 1F1B: the same forward-backward pair; GPipe: the same forward and the same
    backward -- and everything after the cut moves later by the skipped micro-batches' time, which
    keeps every dependency of the simulated schedule. Exact for a step that small.
    """
    p = len(forward)
    simulated = min(micro_batches, 2 * (p + edge))
    events = pipeline_timeline(forward, backward, simulated, schedule)
    skipped = micro_batches - simulated
    if skipped <= 0:
        return Timeline(tuple(events), (), micro_batches, micro_batches)
    half = simulated // 2
    if schedule == "gpipe":
        cuts = (("F", half, max(forward) * skipped), ("B", half, max(backward) * skipped))
    else:
        cuts = (("P", half, max(f + b for f, b in zip(forward, backward)) * skipped),)
    orders = _orders(p, simulated, schedule)
    by_stage: list[list[tuple[int, int, str, float, float]]] = [[] for _ in range(p)]
    for event in events:
        by_stage[event[0]].append(event)
    out, bands = [], []
    for s in range(p):
        stage_events = by_stage[s]          # in the stage's own order (the simulation runs it in order)
        shift = 0.0
        cut_at = {}
        for kind, index, delta in cuts:
            if kind == "P":
                warm = min(p - s - 1, simulated)
                position = warm + 2 * index          # the pair (F(warm + index), B(index)) opens the cut
            else:
                position = orders[s].index((kind, index))
            cut_at[position] = delta
        renumber = 0
        for position, (stage, micro, op, start, end) in enumerate(stage_events):
            if position in cut_at:
                before = stage_events[position - 1][4] if position else start
                bands.append((s, before + shift, before + shift + cut_at[position], skipped))
                shift += cut_at[position]
                renumber = skipped
            # the real step's micro-batch: 1F1B numbers every op after the cut past the skipped ones; GPipe's
            # two cuts, in its forwards and its backwards, each sit at micro-batch `half`
            number = micro + (skipped if micro >= half else 0) if schedule == "gpipe" else micro + renumber
            out.append((stage, number, op, start + shift, end + shift))
    return Timeline(tuple(out), tuple(bands), micro_batches, simulated)
