"""Recompute as a choice: what a layer kind costs under every setting of its switches.

A selective layer's memory and backward time add up over its recompute
switches (docs/ND_MODEL.md §4.4; seed ``recompute/profile.py``): each switch gates
its own activation term and its own recomputed op, and only ``gather``
touches the communication buffers. So the cost of recomputing a set of ops is
the base cost plus, for each op of the set, what recomputing that op alone
adds to the base. A :class:`SwitchProfile` — the plain layer, each switch
alone and the fully recomputed layer — therefore prices all 2**7 = 128
settings of the seven switches every kind has, or 2**8 = 256 where the MLA
up-projections (``attUp``) act as well.

Where a census of the kind priced it (IR phase 5 upstream), three exceptions
apply: the settings add up from ``selective_base`` (the layer selective with
every op kept) rather than the plain layer; a setting measured as a whole
(``whole``) is taken as measured; and the working set as warm-up ends is
clamped (``census_held``) after the sum.

:meth:`SwitchProfile.all_settings` prices every setting at once with the
``switch_settings`` kernel, and :meth:`SwitchProfile.front` keeps the settings
no other setting (or full recompute) beats, with ``dominance_front``.
"""
from __future__ import annotations

import functools
import itertools
import operator
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Iterable, Mapping

import numpy as np

from .. import _backend
from ..errors import SpecError, check_positive_int
from ..spec.recompute_spec import ALL_KEPT, OPTIONAL_SWITCHES, SWITCHES

__all__ = ["Cost", "SwitchProfile", "SwitchSettings", "FULL_KEEP_MASK", "COST_COLUMNS"]

#: The keep mask the full-recompute row of :class:`SwitchSettings` carries. A
#: selective setting that recomputes every acting switch may have keep mask 0,
#: which is not full recompute (that reruns the whole layer), so full gets a
#: mask no setting has.
FULL_KEEP_MASK: int = -1

#: The layout of a cost row as the kernels see it; the excess at each of the
#: profile's counts follows these columns.
COST_COLUMNS: tuple[str, ...] = (
    "memory_per_micro_batch", "memory_once", "backward_time", "working", "first_working", "census_kept",
)
_EXCESS = len(COST_COLUMNS)  # first excess column
_WORKING = COST_COLUMNS.index("working")
_FIRST_WORKING = COST_COLUMNS.index("first_working")
_CENSUS_KEPT = COST_COLUMNS.index("census_kept")
_SWITCH_INDEX = {name: index for index, name in enumerate(SWITCHES)}


@dataclass(frozen=True)
class Cost:
    """What running a layer one way costs (bytes and seconds).

    Attributes:
        memory_per_micro_batch: Bytes the layer keeps per micro-batch in
            flight: its activations, and the communication buffers that grow
            with the micro-batches in flight.
        memory_once: Bytes of communication buffers the layer keeps once,
            however many micro-batches are in flight.
        backward_time: Backward time, the recompute included.
        excess: One entry per count of the profile's ``counts``: the bytes
            ``count · memory_per_micro_batch + memory_once`` charges beyond
            what the layer really keeps with that many micro-batches in
            flight. It is zero at one micro-batch and at the most a stage
            keeps; in between a buffer that stays may hide one that grows.
        working: Bytes the layer's backward holds beyond what the layer keeps
            at one micro-batch, charged to the layer that ends warm-up: under
            resharding FSDP the gathered parameters of two layers (its own and
            the next one's) in their gather buffers; where a census prices the
            layer, what its backward holds beyond what the stage keeps for it
            (before the clamp, see :attr:`SwitchProfile.census_held`). For full
            recompute, measured beyond the plain layer's keep: the backward
            reruns the plain layer on activations the stage never kept.
        first_working: The same for the last backward of a micro-batch, the
            stage's first layer: one layer's gathered parameters (nothing left
            to prefetch), plus everything a census says the backward holds,
            since the stage keeps no activation of that micro-batch for it.
        census_kept: Where a census's per-op records price the layer, the
            bytes it keeps of them at one micro-batch (0 otherwise).

    Costs add and subtract field by field (``excess`` entry by entry, which
    must have equal lengths), which is how a setting's cost is built from the
    costs of its switches alone.
    """

    memory_per_micro_batch: float
    memory_once: float
    backward_time: float
    excess: tuple[float, ...] = ()
    working: float = 0.0
    first_working: float = 0.0
    census_kept: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.excess, tuple):
            object.__setattr__(self, "excess", tuple(self.excess))

    def _combine(self, other: "Cost", operation, symbol: str) -> "Cost":
        if len(self.excess) != len(other.excess):
            # The seed's zip would drop the longer tail silently; a mismatch is a bug upstream.
            raise ValueError(f"Cost {symbol}: excess lengths differ ({len(self.excess)} and {len(other.excess)})")
        return Cost(
            operation(self.memory_per_micro_batch, other.memory_per_micro_batch),
            operation(self.memory_once, other.memory_once),
            operation(self.backward_time, other.backward_time),
            tuple(operation(mine, theirs) for mine, theirs in zip(self.excess, other.excess)),
            operation(self.working, other.working),
            operation(self.first_working, other.first_working),
            operation(self.census_kept, other.census_kept),
        )

    def __add__(self, other: "Cost") -> "Cost":
        """Field by field sum."""
        if not isinstance(other, Cost):
            return NotImplemented
        return self._combine(other, operator.add, "+")

    def __sub__(self, other: "Cost") -> "Cost":
        """Field by field difference."""
        if not isinstance(other, Cost):
            return NotImplemented
        return self._combine(other, operator.sub, "-")

    def values(self) -> tuple[float, float, float]:
        """``(memory_per_micro_batch, memory_once, backward_time)``."""
        return self.memory_per_micro_batch, self.memory_once, self.backward_time

    def row(self) -> tuple[float, ...]:
        """The cost as the kernels' row: :data:`COST_COLUMNS`, then the excess."""
        return (self.memory_per_micro_batch, self.memory_once, self.backward_time,
                self.working, self.first_working, self.census_kept, *self.excess)

    @classmethod
    def from_row(cls, row) -> "Cost":
        """The inverse of :meth:`row`."""
        values = [float(x) for x in row]
        return cls(values[0], values[1], values[2], tuple(values[_EXCESS:]), values[3], values[4], values[5])


@dataclass(frozen=True, eq=False)
class SwitchSettings:
    """Every setting of a profile's acting switches, priced, plus full recompute.

    Row *r* < ``2**len(acting)`` is the selective setting that recomputes
    ``acting[j]`` exactly when bit *j* of *r* is set (``acting`` in
    ``SWITCHES`` order): rows run by increasing recompute bitmask over the
    acting switches, row 0 recomputes nothing (the plain layer) and row
    ``2**len(acting) - 1`` every acting switch. Since the optional switch is
    the last of ``SWITCHES``, ``keep_mask[r] == ALL_KEPT - r`` for either 128
    or 256 settings. The last row is full recompute (``is_full``, keep mask
    :data:`FULL_KEEP_MASK`).

    The arrays are read-only views of one table (:attr:`table`, rows as
    :data:`COST_COLUMNS` then the excess at each count).
    """

    acting: tuple[str, ...]
    counts: tuple[int, ...]
    table: np.ndarray
    keep_mask: np.ndarray
    is_full: np.ndarray

    def __len__(self) -> int:
        return self.table.shape[0]

    @property
    def memory_per_micro_batch(self) -> np.ndarray:
        return self.table[:, 0]

    @property
    def memory_once(self) -> np.ndarray:
        return self.table[:, 1]

    @property
    def backward_time(self) -> np.ndarray:
        return self.table[:, 2]

    @property
    def working(self) -> np.ndarray:
        return self.table[:, _WORKING]

    @property
    def first_working(self) -> np.ndarray:
        return self.table[:, _FIRST_WORKING]

    @property
    def census_kept(self) -> np.ndarray:
        return self.table[:, _CENSUS_KEPT]

    @property
    def excess(self) -> np.ndarray:
        """(rows, len(counts)): the excess of each row at each count."""
        return self.table[:, _EXCESS:]

    def memory_in_flight(self) -> np.ndarray:
        """(rows, len(counts)): each row's memory with *k* micro-batches in flight, at each *k* of
        :attr:`counts`: ``k · memory_per_micro_batch + memory_once − excess[k]`` (a knapsack weight)."""
        at_counts = np.empty((len(self.counts), len(self)), dtype=np.float64)
        _memory_in_flight(self.table.T, self.counts, at_counts)
        return at_counts.T

    def cost(self, row: int) -> Cost:
        """Row *row* as a :class:`Cost`."""
        return Cost.from_row(self.table[row])


def _memory_in_flight(columns: np.ndarray, counts: tuple[int, ...], out: np.ndarray) -> None:
    """``k · per micro-batch + once − excess[k]`` into *out* (counts × rows) from cost-row *columns*.

    Column by column (rows of the transposed table): numpy is slow on short rows.
    """
    np.multiply.outer(np.array(counts, dtype=np.float64), columns[0], out=out)
    out += columns[1]
    out -= columns[_EXCESS:]


@functools.lru_cache(maxsize=None)
def _layout(acting: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """(keep masks, full flags, preference order, acting mask) of the rows for *acting*.

    The preference order lists the rows as the front breaks exact ties:
    fewest switches recomputed first, then the lower recompute bitmask, full
    recompute last.
    """
    n_settings = 1 << len(acting)
    recompute = np.arange(n_settings, dtype=np.int64)
    keep = np.full(n_settings + 1, ALL_KEPT, dtype=np.int64)
    for j, name in enumerate(acting):
        keep[:n_settings] -= ((recompute >> j) & 1) << _SWITCH_INDEX[name]
    keep[n_settings] = FULL_KEEP_MASK
    is_full = np.zeros(n_settings + 1, dtype=bool)
    is_full[n_settings] = True
    order = np.array(sorted(range(n_settings), key=lambda r: (r.bit_count(), r)) + [n_settings], dtype=np.int64)
    acting_mask = sum(1 << _SWITCH_INDEX[name] for name in acting)
    for array in (keep, is_full, order):
        array.setflags(write=False)
    return keep, is_full, order, acting_mask


class _PlainAndFull(dict):
    """Per number of rows, the kernel's always-kept rows in the tie order: plain first, full last."""

    def __missing__(self, n_rows: int) -> np.ndarray:
        rows = np.array([0, n_rows - 1], dtype=np.int64)
        rows.setflags(write=False)
        self[n_rows] = rows
        return rows


_PLAIN_AND_FULL = _PlainAndFull()


def _check_cost(value, parameter: str, n_counts: int) -> "Cost":
    if not isinstance(value, Cost):
        raise SpecError(parameter, "SwitchProfile", "be a Cost", value)
    if len(value.excess) != n_counts:
        raise SpecError(f"{parameter}.excess", "SwitchProfile",
                        f"hold one entry per count ({n_counts})", value.excess)
    return value


def _check_switches(names, parameter: str) -> frozenset[str]:
    chosen = frozenset(names)
    unknown = sorted(chosen.difference(SWITCHES))
    if unknown:
        raise SpecError(parameter, "SwitchProfile", f"name only the switches {', '.join(SWITCHES)}", unknown)
    return chosen


@dataclass(frozen=True)
class SwitchProfile:
    """A layer kind's costs: plain, with each switch's op recomputed alone, and fully recomputed.

    Attributes:
        forward_time: The layer's forward time, the same under every setting.
        plain: The layer keeping every activation.
        alone: Per switch, the layer recomputing that op only. Every switch
            but the optional ``attUp`` needs an entry; ``attUp``, when given
            and different from the base, makes 256 settings of 128.
            Stored read-only, in ``SWITCHES`` order.
        full: The layer fully recomputed.
        counts: The counts of micro-batches in flight (from one to the most a
            stage keeps) at which every cost states its ``excess``.
        selective_base: The layer selective with every op kept, where a
            census prices the plain layer but not a selective one: the
            settings that recompute something add up from it. The plain
            layer when None.
        whole: Settings (the set of switches they recompute) measured as a
            whole, which do not add up over their switches: HyperParallel's
            selective policy where a census prices it. Stored read-only.
        census_held: Where a census's per-op records price the selective
            settings, the bytes the layer's backward holds at one
            micro-batch. A setting's working set as warm-up ends then grows
            by what it keeps beyond that (``census_kept - census_held``, when
            positive), after the sum.
    """

    forward_time: float
    plain: Cost
    alone: Mapping[str, Cost]
    full: Cost
    counts: tuple[int, ...] = ()
    selective_base: Cost | None = None
    whole: Mapping[frozenset, Cost] = field(default_factory=dict)
    census_held: float | None = None

    def __post_init__(self) -> None:
        owner = "SwitchProfile"
        counts = tuple(self.counts)
        for count in counts:
            check_positive_int(count, "counts", owner)
        object.__setattr__(self, "counts", counts)
        n_counts = len(counts)
        _check_cost(self.plain, "plain", n_counts)
        _check_cost(self.full, "full", n_counts)
        if self.selective_base is not None:
            _check_cost(self.selective_base, "selective_base", n_counts)
        if not isinstance(self.alone, Mapping):
            raise SpecError("alone", owner, "be a mapping of switch names to Costs", self.alone)
        _check_switches(self.alone, "alone")
        missing = [name for name in SWITCHES if name not in OPTIONAL_SWITCHES and name not in self.alone]
        if missing:
            raise SpecError("alone", owner, "hold a Cost for every switch but the optional ones", missing)
        alone = {name: _check_cost(self.alone[name], f"alone[{name!r}]", n_counts)
                 for name in SWITCHES if name in self.alone}
        object.__setattr__(self, "alone", MappingProxyType(alone))
        if not isinstance(self.whole, Mapping):
            raise SpecError("whole", owner, "be a mapping of switch sets to Costs", self.whole)
        whole = {}
        for key, cost in self.whole.items():
            chosen = _check_switches(key, "whole")
            whole[chosen] = _check_cost(cost, "whole", n_counts)
        object.__setattr__(self, "whole", MappingProxyType(whole))
        if self.census_held is not None and (isinstance(self.census_held, bool)
                                             or not isinstance(self.census_held, (int, float))):
            raise SpecError("census_held", owner, "be a number of bytes or None", self.census_held)

    def __hash__(self) -> int:
        # The mappings are read-only proxies, which do not hash: hash their items.
        return hash((self.forward_time, self.plain, tuple(self.alone.items()), self.full, self.counts,
                     self.selective_base, frozenset(self.whole.items()), self.census_held))

    def __reduce__(self):
        # A mappingproxy neither pickles nor deep-copies: rebuild from dicts.
        return (SwitchProfile, (self.forward_time, self.plain, dict(self.alone), self.full, self.counts,
                                self.selective_base, dict(self.whole), self.census_held))

    @property
    def base(self) -> Cost:
        """What the settings that recompute something add up from."""
        return self.plain if self.selective_base is None else self.selective_base

    def acting(self) -> tuple[str, ...]:
        """The switches the settings are made of, in ``SWITCHES`` order.

        Every switch, except an optional one (``attUp``) that is absent from
        :attr:`alone` or costs exactly what the base costs: recomputing it
        changes nothing, so it would only double the settings.
        """
        base = self.base
        return tuple(name for name in SWITCHES
                     if name not in OPTIONAL_SWITCHES or (name in self.alone and self.alone[name] != base))

    def selective(self, ops: Iterable[str]) -> Cost:
        """The cost of recomputing the ops *ops* names (switch names; the rest kept).

        Nothing recomputed is the plain layer. A set measured as a whole
        (:attr:`whole`) costs what was measured. Otherwise: the base plus, per
        op (in ``SWITCHES`` order), what recomputing it alone adds to the
        base; then, where a census prices the settings, the working set grows
        by ``max(0, census_kept - census_held)``. An optional switch that
        does not act adds nothing.
        """
        chosen = _check_switches(ops, "ops")
        if chosen in self.whole:
            return self.whole[chosen]
        if not chosen:
            return self.plain
        base = self.base
        cost = base
        for name in SWITCHES:
            if name in chosen and name in self.alone:
                cost = cost + (self.alone[name] - base)
        if self.census_held is not None:
            cost = replace(cost, working=cost.working + max(0.0, cost.census_kept - self.census_held))
        return cost

    def all_settings(self) -> SwitchSettings:
        """Every setting of the acting switches, priced, and full recompute as the last row.

        See :class:`SwitchSettings` for the row order. Priced by the backend's
        ``switch_settings`` kernel (the additive sum), then corrected in
        Python for what does not add up: the plain row where the settings
        add up from ``selective_base``, the census clamp, and the settings
        measured whole. Computed once per profile; the arrays are read-only.
        """
        return self._settings

    def front(self) -> np.ndarray:
        """Rows of :meth:`all_settings` that no other row dominates, ascending.

        Criteria, all lower-is-better: memory per micro-batch, memory once,
        backward time, and the memory at each count *k* of :attr:`counts`,
        ``k · memory_per_micro_batch + memory_once - excess[k]``. A row is
        dominated when another is <= on every criterion and < on one. Of rows
        equal on every criterion, the one recomputing the fewest switches
        stays (the most kept), then the lower row. The plain row (0) and full
        recompute (the last row) always stay. ``settings.keep_mask[front]``
        gives the front's keep masks. Computed once per profile (read-only).
        """
        return self._front

    @functools.cached_property
    def _settings(self) -> SwitchSettings:
        acting = self.acting()
        keep, is_full, _, acting_mask = _layout(acting)
        n_settings = 1 << len(acting)
        width = _EXCESS + len(self.counts)
        base = self.base
        rows = [(self.alone[name] if name in self.alone else base).row() for name in SWITCHES]
        alone = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.float64,
                            count=len(SWITCHES) * width).reshape(len(SWITCHES), width)
        table = np.empty((n_settings + 1, width), dtype=np.float64)
        _backend.kernels.switch_settings(np.array(base.row(), dtype=np.float64), alone, acting_mask, table[:n_settings])
        # What does not add up, as SwitchProfile.selective states it:
        table[0] = self.plain.row()  # nothing recomputed: the plain layer, whatever the base
        if self.census_held is not None:
            over = table[1:n_settings, _CENSUS_KEPT] - self.census_held
            table[1:n_settings, _WORKING] += np.where(over > 0.0, over, 0.0)
        position = {name: j for j, name in enumerate(acting)}
        for chosen, cost in self.whole.items():
            if chosen <= position.keys():
                table[sum(1 << position[name] for name in chosen)] = cost.row()
        table[n_settings] = self.full.row()
        table.setflags(write=False)
        return SwitchSettings(acting, self.counts, table, keep, is_full)

    @functools.cached_property
    def _front(self) -> np.ndarray:
        settings = self._settings
        _, _, order, _ = _layout(settings.acting)
        ranked = settings.table.take(order, axis=0).T  # columns, rows in the order that breaks exact ties
        n_rows = ranked.shape[1]
        # Memory per micro-batch and backward time first: they trade off against each other,
        # which the kernel's staircase test and first comparisons are fastest on.
        columns = np.empty((3 + len(self.counts), n_rows), dtype=np.float64)
        columns[0] = ranked[0]
        columns[1] = ranked[2]
        columns[2] = ranked[1]
        _memory_in_flight(ranked, self.counts, columns[3:])
        criteria = np.ascontiguousarray(columns.T)
        keep = np.empty(n_rows, dtype=np.int64)
        _backend.kernels.dominance_front(criteria, criteria.shape[1], _PLAIN_AND_FULL[n_rows], keep)
        kept = np.empty(n_rows, dtype=np.int64)
        kept[order] = keep
        rows = np.flatnonzero(kept)
        rows.setflags(write=False)
        return rows
