"""A drop-in for SAPP-ND's ``estimate_performance`` (seed estimate.py).

An ND search loop builds an attribute-style cost-model config with ND's field
names (d, t, p, vp, cp, ep, m, b, s, h, a, n_kv, hff, n_lay, v, ...) and asks
for its score. :func:`estimate_performance` accepts such a config (an object
with attributes, or a mapping), turns it into ndcost's Model, ExecSpec and
Cluster, and returns ND's score from ndcost's kernels — same ranking, far
faster. A field the config lacks reads as ND's default, never as an error,
as ND's ``Config`` does; a config that states an impossible strategy raises
:class:`~ndcost.errors.SpecError` naming the ND field.

A search loop builds a fresh config for every candidate: its fields (:data:`ND_FIELDS`) are read
in one pass, and a config equal to one seen before takes its Model, ExecSpec and Cluster from a
cache instead of building and validating them again (see ``_priced_inputs``).

A multimodal config (``multimodal=True`` with ``mm_ccfgs``, ``mm_order`` and
``mm_main``, docs/ND_MODEL.md §1.3 "Meta") becomes a text Model with a
:class:`~ndcost.spec.vision.VisionTower`: the main submodule is the text model, the
other one the tower (its ``n_lay``, ``h``, ``a``, ``hff``; its ``s`` is ND's
merged image tokens, grid // merge²). The strategy is the parent's, shared by
every submodule as ND's ``set_shared_strategy`` does.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
import operator
from itertools import repeat
from typing import Any

from .spec.device import Cluster
from .errors import SpecError
from .price.estimate import estimate
from .price.estimate_one import estimate_nd_one
from .spec.exec_spec import ExecSpec
from .spec.model import Model
from .spec.vision import VisionTower

__all__ = ["estimate_performance", "model_from_nd", "spec_from_nd", "ND_DEVICES", "RatioType", "RecType"]

#: ND's device_map names (docs/ND_MODEL.md §2.12) -> ndcost catalog devices.
ND_DEVICES = {"A2": "ascend-910b", "A3": "ascend-910c"}


class RatioType:
    """ND's RatioType names (docs/ND_MODEL.md §2.7)."""

    DYNAMIC, STATIC, COMPUTE_ONLY, COMM_ONLY = "DYNAMIC", "STATIC", "COMPUTE_ONLY", "COMM_ONLY"


class RecType:
    """ND's RecType names (docs/ND_MODEL.md §2.7)."""

    WITH, NONE, COMPUTE_ONLY, COMM_ONLY = "WITH", "NONE", "COMPUTE_ONLY", "COMM_ONLY"


@functools.lru_cache(maxsize=512)
def _interned_by_value(cls: type, items: tuple) -> Any:
    return cls(**dict(items))


def _interned(cls: type, fields: dict) -> Any:
    """``cls(**fields)``, one object for equal fields: ndcost's per-model tables are cached on the
    object, so an equal Model must be the same object to be priced at batch-of-one speed.
    Frozen dataclasses only, so sharing is safe; an unhashable field builds a fresh object."""
    try:
        # the builders below fill their dicts in a fixed order, so equal fields make equal tuples
        return _interned_by_value(cls, tuple(fields.items()))
    except TypeError:
        return cls(**fields)


#: The fields of an ND config the drop-in reads (docs/ND_MODEL.md §1.3): whether it is multimodal, the
#: model's, the strategy's, then the four whose type matters as well as their value (see _priced_inputs).
#: A unimodal config is read in one pass over these names.
ND_FIELDS: tuple[str, ...] = (
    "multimodal",
    # model ("Model" and "MoE")
    "h", "n_lay", "a", "v", "n_kv", "dh", "hff", "n_exp", "hff_exp", "n_shared_exp", "n_chosen_exp",
    "k_1st_dense", "dc_kv", "dc_q", "dhr", "qk_nope_head_dim", "v_head_dim", "n_mtp", "qk_norm", "n_qknorm",
    "attn_output_gate", "shared_expert_gate", "tie_emb_out",
    # strategy
    "d", "t", "p", "vp", "cp", "ep", "b", "m", "s", "sp", "sequence_parallel", "has_op", "grad_shard_as_params",
    "has_grad_shard", "os_max_shard", "bytes_p", "bytes_compute", "cap_fact", "has_fa", "cp_algo", "pp_sched",
    "is_mtp_in_offset", "emb_out_in_offset", "sel_rec_rule", "vocab_emb_dp", "moe_dispatch", "n_dispatch",
    # keyed by type as well
    "model_name", "offset", "full_rec", "sel_rec",
)
_TYPED_FROM = ND_FIELDS.index("model_name")
_STRATEGY_FROM = ND_FIELDS.index("d")
_NO_VALUES = (None,) * len(ND_FIELDS)
_NONE_TYPED = _NO_VALUES[_TYPED_FROM:]


def _values(cfg: Any) -> tuple:
    """The config's value of every ND_FIELDS name, None where it has none.

    A plain object (attribute lookup not overridden, an instance dict) is read off its instance
    dict over a dict of Nones in one C-level pass, with getattr only for the names its class
    defines (a class default, a property, a slot: the class decides what those read). That is
    what getattr would give, at half the cost on ND's configs, which state a third of the 54
    fields: getattr pays a failed lookup through the class for each field a config lacks.
    """
    if isinstance(cfg, Mapping):
        return tuple(map(cfg.get, ND_FIELDS))
    cls = type(cfg)
    by_class = _class_fields(cls)
    instance = getattr(cfg, "__dict__", None)
    if by_class is None or type(instance) is not dict:
        return tuple(map(getattr, repeat(cfg), ND_FIELDS, _NO_VALUES))
    merged = _NONE_FIELDS.copy()
    merged.update(instance)
    for name in by_class:
        merged[name] = getattr(cfg, name, None)
    return _GET_FIELDS(merged)


_NONE_FIELDS = dict.fromkeys(ND_FIELDS)
_GET_FIELDS = operator.itemgetter(*ND_FIELDS)
_OBJECT_GETATTRIBUTE = object.__getattribute__
#: type -> (the sizes of its MRO's namespaces, the ND_FIELDS names its MRO defines, or None when
#: the class overrides attribute lookup)
_CLASS_FIELDS: dict[type, tuple[Any, tuple[str, ...] | None]] = {}


def _class_fields(cls: type) -> tuple[str, ...] | None:
    """The ND_FIELDS names *cls* (or a base) defines; None when *cls* overrides attribute lookup
    (``__getattr__``, ``__getattribute__``). Worked out again whenever a namespace of its MRO gains
    or loses a name (their sizes are the key), so a class changed mid-search is read as it is now."""
    mro = cls.__mro__
    # object's namespace never changes: a class of object alone keys by its own namespace's size
    sizes = len(cls.__dict__) if len(mro) == 2 else tuple(len(klass.__dict__) for klass in mro)
    known = _CLASS_FIELDS.get(cls)
    if known is not None and known[0] == sizes:
        return known[1]
    plain = cls.__getattribute__ is _OBJECT_GETATTRIBUTE and not hasattr(cls, "__getattr__")
    fields = tuple(name for name in ND_FIELDS if any(name in klass.__dict__ for klass in mro)) if plain else None
    if len(_CLASS_FIELDS) >= 256:
        _CLASS_FIELDS.clear()
    _CLASS_FIELDS[cls] = (sizes, fields)
    return fields


def _defaulted(value: Any, default: Any) -> Any:
    return default if value is None else value


def _reader(cfg: Any):
    """get(name, default): the config's field, or *default* when it lacks it or holds None (ND's Config)."""
    if isinstance(cfg, Mapping):
        return lambda name, default=0: _defaulted(cfg.get(name), default)
    return lambda name, default=0: _defaulted(getattr(cfg, name, None), default)


def _values_reader(values: tuple):
    """get(name, default) over a config's ND_FIELDS *values*: the dict.get of the fields it states."""
    return {name: value for name, value in zip(ND_FIELDS, values) if value is not None}.get


def _int(get: Any, name: str, default: Any = 0) -> int:
    """int() of the config's field *name*, as ND reads its counts, or the SpecError naming it."""
    value = get(name, default)
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise _not_a_number(name, value) from None


def _float(get: Any, name: str, default: Any = 0) -> float:
    """float() of the config's field *name*, or the SpecError naming it."""
    value = get(name, default)
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        raise _not_a_number(name, value) from None


def _not_a_number(name: str, value: Any) -> SpecError:
    """A field that holds no number ND could read (a list, a word, NaN or inf as a count)."""
    return SpecError(name, "estimate_performance", "be a number", value)


def _submodules(cfg: Any) -> tuple[Any, Any] | None:
    """(text, vision) sub-configs of a multimodal ND config, or None for a unimodal one."""
    get = _reader(cfg)
    if not get("multimodal", False):
        return None
    subs, order = get("mm_ccfgs", None), list(get("mm_order", None) or ())
    if not isinstance(subs, Mapping) or len(order) != 2 or any(name not in subs for name in order):
        raise SpecError("mm_ccfgs", "estimate_performance",
                        "hold the two submodules mm_order names (a text model and a vision tower)", subs)
    main = get("mm_main", None) or order[-1]
    if main not in order:
        raise SpecError("mm_main", "estimate_performance", f"be one of mm_order ({', '.join(order)})", main)
    other = order[0] if order[1] == main else order[1]
    return subs[main], subs[other]


def _vision_from_nd(sub: Any, text_hidden: int) -> VisionTower:
    get = _reader(sub)
    merge = _int(get, "spatial_merge_size", 2)
    return VisionTower(
        depth=_int(get, "n_lay"), hidden_size=_int(get, "h"), num_heads=_int(get, "a"),
        intermediate_size=_int(get, "hff"), out_hidden_size=text_hidden, spatial_merge_size=merge,
        # ND's vision profile counts 2 FFN matmuls (a GELU MLP) unless the sub-config says 3.
        gated_ffn=_float(get, "n_ffMM", 2) == 3.0,
        tokens=_int(get, "s") * merge * merge,      # ND's s is grid // merge²: the encoder runs every patch
    )


def model_from_nd(cfg: Any) -> Model:
    """The Model an ND config describes (docs/ND_MODEL.md §1.3 "Model" and "MoE" fields)."""
    subs = _submodules(cfg)
    if subs is not None:
        text = model_from_nd(subs[0])
        return dataclasses.replace(text, vision=_vision_from_nd(subs[1], text.hidden_size))
    return _interned(Model, _model_fields(_reader(cfg)))


def _model_fields(get: Any) -> dict[str, Any]:
    n_exp = _int(get, "n_exp", 1)
    moe = n_exp > 1
    hff_exp = _int(get, "hff_exp", 0) if moe else None
    n_shared = _int(get, "n_shared_exp", 0) if moe else 0
    return dict(
        name=str(get("model_name", "nd-config") or "nd-config"),
        hidden_size=_int(get, "h"), num_hidden_layers=_int(get, "n_lay"), num_attention_heads=_int(get, "a"),
        vocab_size=_int(get, "v"),
        num_key_value_heads=_int(get, "n_kv", 0) or None,
        head_dim=_int(get, "dh", 0) or None,
        intermediate_size=_int(get, "hff", 0) or None,
        num_experts=n_exp if moe else 0,
        num_experts_per_tok=_int(get, "n_chosen_exp", 1) if moe else 0,
        moe_intermediate_size=hff_exp,
        shared_expert_intermediate_size=n_shared * (hff_exp or 0),
        first_k_dense_replace=_int(get, "k_1st_dense", 0) if moe else 0,
        kv_lora_rank=_int(get, "dc_kv", 0), q_lora_rank=_int(get, "dc_q", 0),
        qk_rope_head_dim=_int(get, "dhr", 0), qk_nope_head_dim=_int(get, "qk_nope_head_dim", 0),
        v_head_dim=_int(get, "v_head_dim", 0),
        num_nextn_predict_layers=_int(get, "n_mtp", 0),
        qk_norm=bool(get("qk_norm", False) or get("n_qknorm", 0)),
        attn_output_gate=bool(get("attn_output_gate", False)),
        shared_expert_gate=bool(get("shared_expert_gate", False)),
        tie_word_embeddings=bool(get("tie_emb_out", False)),
        family="deepseek_v3" if _int(get, "dc_kv", 0) else "llama",
    )


def spec_from_nd(cfg: Any) -> ExecSpec:
    """The ExecSpec an ND config states (seed apply_exec CONFIG_FIELDS, read backwards)."""
    subs = _submodules(cfg)
    return _spec(_reader(cfg) if subs is None else _shared_reader(cfg, subs[0]))


def _spec(get: Any) -> ExecSpec:
    t = _int(get, "t", 1)
    sequence_parallel = _sequence_parallel(get, t)
    has_op = bool(get("has_op", False))
    zero = 0
    if has_op:
        zero = 3 if get("grad_shard_as_params", False) else (2 if get("has_grad_shard", False) else 1)
    fields: dict[str, Any] = dict(
        dp=_int(get, "d", 1), tp=t, pp=_int(get, "p", 1), vpp=_int(get, "vp", 1), cp=_int(get, "cp", 1),
        ep=_int(get, "ep", 1), sequence_parallel=sequence_parallel and t > 1,
        micro_batch_size=_int(get, "b", 1), micro_batch_num=_int(get, "m", 1), seq_length=_int(get, "s"),
        zero_stage=zero, param_bytes=_int(get, "bytes_p", 2), compute_bytes=_int(get, "bytes_compute", 2),
        capacity_factor=_float(get, "cap_fact", 1.0) or 1.0,
        flash_attention=bool(get("has_fa", True)),
        cp_algo="ulysses" if str(get("cp_algo", "colossalai_cp")).lower().startswith("ulysses") else "ring",
        pp_schedule=_schedule(str(get("pp_sched", "1f1b") or "1f1b"), _int(get, "vp", 1)),
        mtp_in_offset=bool(get("is_mtp_in_offset", True)),
        emb_out_in_offset=bool(get("emb_out_in_offset", False)),
        selective_rule=str(get("sel_rec_rule", "mindformers") or "mindformers"),
        vocab_emb_dp=bool(get("vocab_emb_dp", False)),
    )
    if has_op and get("os_max_shard", 0):
        shard = _int(get, "os_max_shard")
        if shard >= 1 and fields["dp"] % shard == 0:
            fields["optimizer_shard"] = shard
    if get("moe_dispatch", None) is not None:
        fields["moe_dispatch"] = _float(get, "moe_dispatch")
    # the layer's dispatch count: 0 where the config states none, as ND's config reads it (§2.3)
    fields["moe_dispatch_count"] = _float(get, "n_dispatch", 0)
    offset = get("offset", None)
    if offset:
        fields["offset"] = offset
    for nd_name, name in (("full_rec", "full_recompute"), ("sel_rec", "selective_recompute")):
        value = get(nd_name, None)
        if value not in (None, False, 0):
            fields[name] = value
    return ExecSpec(**fields)


def _sequence_parallel(get: Any, t: int) -> bool:
    """Whether the config runs sequence parallelism, as ND's op table reads it: from ``sp``, the
    factor derive() sets (t with SP, else 1) and the table divides by (docs/ND_MODEL.md §1.4 derive step 1,
    §2.2), where the config states it; ``sequence_parallel``, what derive() reads, only where it does
    not. A config answers 0 for a field it lacks (ND's Config), so an ``sp`` of 0 is not stated.

    Raises:
        SpecError: For an ``sp`` that is neither 1 nor t: a factor no run of derive() sets, which
            ndcost's on/off sequence parallelism cannot price.
    """
    if get("sp", None) in (None, 0):
        return bool(get("sequence_parallel", False))
    factor = _int(get, "sp")
    if factor not in (1, t):
        raise SpecError("sp", "estimate_performance", f"be 1 or t ({t}), the factors ND's derive() sets", factor)
    return factor > 1


def _shared_reader(parent: Any, text: Any):
    """The parent's strategy fields, the text submodule's where the parent states none."""
    own, sub = _reader(parent), _reader(text)
    missing = object()
    return lambda name, default=0: (value if (value := own(name, missing)) is not missing
                                    else sub(name, default))


def _schedule(name: str, vp: int) -> str:
    lowered = name.lower()
    if lowered in ("seqpipe", "seqsmartvpp"):
        return "seq1f1b"
    if lowered in ("zero_bubble_v", "gpipe"):
        return lowered
    return "1f1b"


def estimate_performance(cfg: Any, stages: Any = None, extra_custom_func: Any = None, ccfg: Any = None,
                         debugger: Any = None, device_type: Any = "A2", memory: Any = None, *,
                         cache_file: Any = None, stage_focused: int | None = None, stage_savings: Any = None,
                         return_parts: bool = False):
    """ND's score of an ND config (the seeds' ``estimate_performance``), from ndcost's kernels.

    Args:
        cfg: An ND cost-model config (attributes or a mapping, ND's field names).
        stages: ND's explicit partition; not supported — ndcost lays the config out itself
            from its offset and recompute fields (raises if given).
        ccfg: ND's CustomConfig (attributes rtype, retype, ptype, by name or enum with ``.name``).
        device_type: ``"A2"``, ``"A3"``, or an ndcost catalog device name.
        cache_file: A ratios JSON: the score becomes milliseconds (seed apply_regression_coefficients).
        stage_focused, stage_savings: As the seeds.
        return_parts: Also return the parts (dict).
    """
    if stages is not None:
        raise SpecError("stages", "estimate_performance", "be None (ndcost lays out the config itself)", "a partition")
    if extra_custom_func is not None:
        extra_custom_func(cfg)
    device = ND_DEVICES.get(device_type, device_type) if isinstance(device_type, str) else \
        ND_DEVICES.get(getattr(device_type, "name", ""), "ascend-910b")
    model, spec, cluster = _priced_inputs(cfg, device)
    ratio_type, rec_type, p2p = _DEFAULT_OPTIONS if ccfg is None else _options(ccfg)
    # the one path: estimate() in ND units (validation, the batch-of-one kernels), without memory
    if ccfg is None and cache_file is None and stage_savings is None and stage_focused is None:
        # the ND loop's call: what estimate(units="nd", with_memory=False) runs on these inputs (a
        # Model, an ExecSpec and a Cluster, no ratios or plan view), without its dispatch
        priced = estimate_nd_one(model, spec, cluster, None, *_DEFAULT_OPTIONS, False)
    else:
        priced = estimate(
            model, spec, cluster, units="nd", ratios=cache_file, ratio_type=ratio_type, rec_type=rec_type, p2p=p2p,
            stage_savings=stage_savings, stage_focused=stage_focused, with_memory=False,
        )
    if return_parts:
        return priced.step_time, dict(priced.parts)
    return priced.step_time


#: ND's CustomConfig defaults: (ratio_type, rec_type, p2p).
_DEFAULT_OPTIONS = ("DYNAMIC", "WITH", False)


def _options(ccfg: Any) -> tuple[str, str, bool]:
    """(ratio_type, rec_type, p2p) a CustomConfig states (rtype, retype, ptype: names or enums)."""
    def option(name: str, default: str) -> str:
        value = getattr(ccfg, name, None)
        return default if value is None else getattr(value, "name", str(value)).upper()

    return option("rtype", "DYNAMIC"), option("retype", "WITH"), option("ptype", "NONE") == "MANUAL"


#: (device, a config's ND_FIELDS values[, the typed forms of the last four]) -> (Model, ExecSpec, Cluster).
_PRICED_INPUTS: dict[tuple, tuple[Model, ExecSpec, Cluster]] = {}
_PRICED_INPUTS_SIZE = 4096
#: The types a config's values must have to be cached (their equal values convert alike).
_PLAIN_TYPES = frozenset({int, float, bool, str, type(None)})


def _priced_inputs(cfg: Any, device: str) -> tuple[Model, ExecSpec, Cluster]:
    """The Model, ExecSpec and Cluster a config prices on *device*.

    An ND search builds a fresh config object for every candidate, with the same model fields and
    changing strategy fields. Equal configs are priced from one cache entry, keyed by the config's
    values read in one pass, so a config seen before is neither rebuilt nor validated again.

    The builders convert a value with int(), float(), bool() or str(), which agree on equal numbers
    (8, 8.0; 1, True) but for str(): so the model's name, and the fields that pass to ExecSpec as
    they are (offset, full_rec, sel_rec: an offset of 1 is valid, of True is not), key with the type
    of every item beside its value. Only configs of plain values are stored (_PLAIN_TYPES); a
    multimodal one, whose sub-configs are the caller's objects (which may change), is built every call.
    """
    fast = _instance_key(cfg, device)
    if fast is not None:
        try:
            inputs = _BY_INSTANCE.get(fast)
        except TypeError:   # an unhashable value (a list offset): keyed by its values below
            fast = None
        else:
            if inputs is not None:
                return inputs
    inputs, kept = _inputs_by_values(_values(cfg), cfg, device)
    if kept and fast is not None:
        if len(_BY_INSTANCE) >= _PRICED_INPUTS_SIZE:
            _BY_INSTANCE.clear()
        _BY_INSTANCE[fast] = inputs
    return inputs


def _inputs_by_values(values: tuple, cfg: Any, device: str) -> tuple[tuple[Model, ExecSpec, Cluster], bool]:
    """(the config's (Model, ExecSpec, Cluster) from its ND *values*, whether they are kept by them)."""
    if values[0]:     # multimodal
        model = model_from_nd(cfg)
        spec = spec_from_nd(cfg)
        return (model, spec, _cluster(device, spec.num_devices)), False
    typed = values[_TYPED_FROM:]
    try:
        key = (device, values) if typed == _NONE_TYPED else (device, values, tuple(map(_typed, typed)))
        return _PRICED_INPUTS[key], True
    except KeyError:
        pass
    except TypeError:  # an unhashable value, or one nested past a 2-D grid: built every call
        return _built_inputs(values, device), False
    inputs = _built_inputs(values, device)
    if not _PLAIN_TYPES.issuperset(map(type, values[:_TYPED_FROM])):
        return inputs, False
    if len(_PRICED_INPUTS) >= _PRICED_INPUTS_SIZE:
        _PRICED_INPUTS.clear()
    _PRICED_INPUTS[key] = inputs
    return inputs, True


#: (device, a plain config's attribute names, their values[, its typed fields typed]) -> the entry
#: _PRICED_INPUTS holds for the ND values those attributes read: the ND loop's configs -- one
#: constructor, so one attribute order -- keyed without projecting them onto the 54 fields.
_BY_INSTANCE: dict[tuple, tuple[Model, ExecSpec, Cluster]] = {}
#: a config's attribute names -> the positions of the typed ND fields among them (offset, full_rec, ...)
_TYPED_AT: dict[tuple[str, ...], tuple[int, ...]] = {}
_TYPED_NAMES = frozenset(ND_FIELDS[_TYPED_FROM:])


def _instance_key(cfg: Any, device: str) -> tuple | None:
    """The key of a plain config in _BY_INSTANCE, or None when it has none.

    A config whose class defines none of ND's fields and leaves attribute lookup alone reads every
    field off its instance dict (_values), so its attribute names and values decide what the
    builders see. Equal numbers of other types read alike (the builders convert with int() and
    float()) but for the typed fields, keyed with their types as _PRICED_INPUTS keys them. Only
    entries the values' cache keeps are stored here (plain values, no sub-configs), so a value of
    another kind can only meet an entry it equals.
    """
    if isinstance(cfg, Mapping) or _class_fields(type(cfg)) != ():
        return None
    instance = getattr(cfg, "__dict__", None)
    if type(instance) is not dict:
        return None
    names = tuple(instance)
    typed_at = _TYPED_AT.get(names)
    if typed_at is None:
        if len(_TYPED_AT) >= 256:
            _TYPED_AT.clear()
        typed_at = _TYPED_AT[names] = tuple(i for i, name in enumerate(names) if name in _TYPED_NAMES)
    values = tuple(instance.values())
    if not typed_at:
        return device, names, values
    try:
        return device, names, values, tuple(_typed(values[i]) for i in typed_at)
    except TypeError:   # nested past a 2-D grid
        return None


def _typed(value: Any, depth: int = 2) -> tuple:
    """*value* beside its type, a list or tuple item by item (up to a 2-D grid), hashable."""
    if isinstance(value, (list, tuple)):
        if not depth:
            raise TypeError("nested deeper than ExecSpec's grids")
        return (type(value), tuple(_typed(item, depth - 1) for item in value))
    return (type(value), value)


def _built_inputs(values: tuple, device: str) -> tuple[Model, ExecSpec, Cluster]:
    get = _values_reader(values)
    model = _model(values, get)        # the model first: its errors come first, as ND's
    spec = _spec(get)
    return model, spec, _cluster(device, spec.num_devices)


#: A config's model values (and its name, with the name's type) -> its Model: a search prices
#: thousands of strategies of one model, each a new cache entry above but the same Model.
_MODELS: dict[tuple, Model] = {}
_MODELS_SIZE = 512


def _model(values: tuple, get: Any) -> Model:
    name = values[_TYPED_FROM]
    key = (values[1:_STRATEGY_FROM], name, type(name))
    try:
        return _MODELS[key]
    except (KeyError, TypeError):   # not seen, or unhashable
        pass
    model = _interned(Model, _model_fields(get))
    if _PLAIN_TYPES.issuperset(map(type, key[0])):
        if len(_MODELS) >= _MODELS_SIZE:
            _MODELS.clear()
        _MODELS[key] = model
    return model


@functools.lru_cache(maxsize=256)
def _cluster(device: str, num_devices: int) -> Cluster:
    """One Cluster per (device, size): its constants are cached on the object."""
    return Cluster(device=device, num_devices=num_devices)
