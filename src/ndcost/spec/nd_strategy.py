"""ND's keyword strategy (``set_strategy``'s keywords) read as an ExecSpec: :meth:`ExecSpec.from_strategy`.

The keywords are ND's (``dp, mp, pp, mb, mbs, op, sp, ...``), with the semantics of the seed
``nd/common/apply_exec.py`` ``strategy_exec`` (docs/ND_MODEL.md §1.4).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..errors import SpecError
from .exec_spec_rules import is_int

if TYPE_CHECKING:
    from .exec_spec import ExecSpec

__all__ = ["spec_from_strategy"]


def spec_from_strategy(
    cls: type[ExecSpec],
    *,
    dp: int,
    mp: int,
    pp: int,
    mb: int,
    mbs: int = 1,
    op: int | None = None,
    sp: Any = None,
    ep: int = 1,
    etp: int | None = None,
    cp: int = 1,
    vpp: int = 1,
    offset: Any = None,
    full_rec: Any = None,
    sel_rec: Any = None,
    **fields: Any,
) -> ExecSpec:
    """The spec ND's keyword strategy (``set_strategy``'s keywords) states.

    Follows the seed ``apply_exec.strategy_exec`` (docs/ND_MODEL.md §1.4):

    * ``mp`` is tp, ``mb`` micro_batch_num, ``mbs`` micro_batch_size, and
      global_batch_size = mbs*dp*mb.
    * ``op`` is the optimizer sharding: optimizer_shard = op, and the
      optimizer is sharded (zero_stage 1) when op > 1, not (zero_stage 0)
      otherwise -- unless *fields* states zero_stage itself.
    * ``sp``: sequence parallelism is ``bool(sp)`` where stated, else the
      run's (a ``sequence_parallel`` in *fields*), else on: the seed
      turns it "on at every TP degree for a run that states none".
    * ``etp`` <= 1 means "experts follow tp" in ND (derive step 2), which
      is ``etp=None`` here.
    * ``offset``, ``full_rec`` and ``sel_rec`` pass through as offset,
      full_recompute and selective_recompute; every other keyword
      (``seq_length``, ...) is an ExecSpec field passed through.
    """
    owner = "ExecSpec.from_strategy"
    stated: dict[str, Any] = {
        "dp": dp, "tp": mp, "pp": pp, "micro_batch_num": mb, "micro_batch_size": mbs,
        "ep": ep, "cp": cp, "vpp": vpp,
        "etp": None if is_int(etp) and etp <= 1 else etp,
    }
    if offset is not None:
        stated["offset"] = offset
    if full_rec is not None:
        stated["full_recompute"] = full_rec
    if sel_rec is not None:
        stated["selective_recompute"] = sel_rec
    if op is not None:
        if not is_int(op):
            raise SpecError("op", owner, "be an integer or None", op)
        if op > 1:
            stated["optimizer_shard"] = op
        # op <= 1 means no optimizer sharding (seed: optimizer_parallel = op > 1).
        if "zero_stage" not in fields:
            stated["zero_stage"] = 1 if op > 1 else 0
    for name in stated:
        if name in fields:
            raise SpecError(name, owner, "be stated once, by its ND keyword", fields[name])
    run_sp = fields.pop("sequence_parallel", None)
    stated["sequence_parallel"] = bool(sp) if sp is not None else (run_sp is None or bool(run_sp))
    if all(is_int(value) for value in (mbs, dp, mb)):
        stated["global_batch_size"] = mbs * dp * mb
    if "global_batch_size" in fields:
        # A stated global batch must agree with mbs*dp*mb: ExecSpec checks it.
        stated["global_batch_size"] = fields.pop("global_batch_size")
    return cls(**stated, **fields)
