"""The ND drop-in (``ndcost.nd.estimate_performance``) with fresh configs, as an ND search loop
calls it: the score equals estimate(units="nd") on the same strategy, and the cache of priced
inputs (keyed by the config's values) never answers for a config that differs in a way the
builders see -- a type the spec refuses, a changed attribute, a list offset."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import ndcost
from ndcost import nd
from ndcost.nd import ND_FIELDS, estimate_performance, model_from_nd, spec_from_nd

STRATEGIES = [(t, p) for t in (1, 2, 4, 8) for p in (1, 2, 4, 8)]


class Config:
    """An ND cost-model config as a search loop builds it: plain attributes, ND's field names."""

    def __init__(self, t: int = 4, p: int = 2, **more) -> None:
        self.d, self.t, self.p, self.vp, self.m, self.b, self.s = 64 // (t * p), t, p, 1, 16, 1, 4096
        self.h, self.a, self.n_kv, self.hff, self.n_lay, self.v = 8192, 64, 8, 28672, 80, 128256
        self.bytes_p, self.bytes_compute, self.has_op, self.sp = 2, 2, True, t
        for name, value in more.items():
            setattr(self, name, value)


def _reference(cfg) -> float:
    model, spec = model_from_nd(cfg), spec_from_nd(cfg)
    return ndcost.estimate(model, spec, ndcost.Cluster("ascend-910b", num_devices=spec.num_devices),
                           units="nd", with_memory=False).step_time


def test_fresh_configs_score_as_estimate_on_the_same_strategy():
    for t, p in itertools.islice(itertools.cycle(STRATEGIES), 48):   # every strategy three times
        score = estimate_performance(Config(t, p), device_type="A2")
        assert score == pytest.approx(_reference(Config(t, p)), rel=1e-12)


def test_a_mapping_config_scores_as_the_attribute_one():
    cfg = Config(8, 2)
    assert estimate_performance(dict(vars(cfg))) == estimate_performance(cfg)


def test_equal_configs_share_one_model_and_spec():
    first = nd._priced_inputs(Config(8, 8), "ascend-910b")
    again = nd._priced_inputs(Config(8, 8), "ascend-910b")
    other = nd._priced_inputs(Config(2, 4), "ascend-910b")
    assert all(a is b for a, b in zip(first, again))
    assert other[0] is first[0]            # one Model for every strategy: its tables are built once
    assert other[1] != first[1]


def test_a_changed_attribute_is_priced_anew():
    cfg = Config(4, 2)
    before = estimate_performance(cfg)
    cfg.m = 32
    assert estimate_performance(cfg) == pytest.approx(_reference(cfg), rel=1e-12)
    assert estimate_performance(cfg) != before


@pytest.mark.parametrize("field, valid, refused", [
    ("offset", (1, -1), (True, -1)),         # equal tuples, items of other types: a bool is refused
    ("offset", [[1, 0], [0, -1]], [[True, 0], [0, -1]]),
    ("full_rec", True, 1),                   # full recompute everywhere; 1 is not a per-stage list
])
def test_the_cache_tells_values_apart_by_type(field, valid, refused):
    for order in ((valid, refused), (refused, valid)):
        for value in order:
            cfg = Config(4, 2, vp=2 if isinstance(value, list) else 1, **{field: value})
            if value is refused:
                with pytest.raises(ndcost.SpecError):
                    estimate_performance(cfg)
            else:
                assert estimate_performance(cfg) == pytest.approx(_reference(cfg), rel=1e-12)


def test_list_and_tuple_offsets_price_alike():
    as_list = estimate_performance(Config(4, 2, offset=[1, -1]))
    assert estimate_performance(Config(4, 2, offset=(1, -1))) == as_list
    assert as_list == pytest.approx(_reference(Config(4, 2, offset=[1, -1])), rel=1e-12)


def test_values_of_other_types_are_priced_but_not_kept():
    nd._PRICED_INPUTS.clear()
    nd._BY_INSTANCE.clear()
    cfg = Config(4, 2, h=np.int64(8192), d=np.int64(8))
    assert estimate_performance(cfg) == estimate_performance(Config(4, 2))
    assert len(nd._PRICED_INPUTS) == 1      # the plain config's entry only
    assert len(nd._BY_INSTANCE) == 1


def test_the_model_name_keys_by_type():
    for name in (1, True, "1"):
        cfg = Config(4, 2, model_name=name)
        model, _, _ = nd._priced_inputs(cfg, "ascend-910b")
        assert model.name == str(name)


class _Recording:
    """A config that records every field the drop-in reads."""

    def __init__(self, **fields) -> None:
        object.__setattr__(self, "fields", fields)
        object.__setattr__(self, "read", set())

    def __getattr__(self, name):
        self.read.add(name)
        return self.fields.get(name)


@pytest.mark.parametrize("extra", [
    {},
    # MoE with shared experts, MLA, MTP, and every strategy field the builders branch on
    dict(n_exp=64, hff_exp=1408, n_shared_exp=2, n_chosen_exp=6, k_1st_dense=1, dc_kv=512, dc_q=1536, dhr=64,
         qk_nope_head_dim=128, v_head_dim=128, n_mtp=1, qk_norm=True, moe_dispatch=0.0, os_max_shard=2,
         has_grad_shard=True, offset=[1, 0], full_rec=[1, 0], sel_rec=[0, 1], model_name="moe"),
])
def test_the_builders_read_only_nd_fields(extra):
    fields = dict(vars(Config(4, 2)), n_kv=None, **extra)
    if "n_exp" in fields:
        fields.update(h=2048, a=16, hff=10944, n_lay=8)
    cfg = _Recording(**fields)
    model_from_nd(cfg)
    # the Model is cached by the model's fields (and its name) alone
    assert cfg.read <= set(ND_FIELDS[:ND_FIELDS.index("d")]) | {"model_name"}
    spec_from_nd(cfg)
    assert cfg.read <= set(ND_FIELDS)
    # and the cached path, which refuses any other name, prices it
    assert estimate_performance(_Recording(**fields)) == pytest.approx(_reference(_Recording(**fields)), rel=1e-12)


def test_a_multimodal_config_is_built_every_call_from_its_submodules():
    class Sub:
        def __init__(self, **fields) -> None:
            self.__dict__.update(fields)

    text = Sub(h=3584, n_lay=28, a=28, n_kv=4, hff=18944, v=152064, s=4096)
    cfg = Sub(multimodal=True, mm_ccfgs={"vision": Sub(h=1280, n_lay=32, a=16, hff=3420, s=1024), "text": text},
              mm_order=["vision", "text"], d=8, t=4, p=2, m=8, b=1, s=4096, sp=4)
    first = estimate_performance(cfg)
    assert first == pytest.approx(_reference(cfg), rel=1e-12)
    text.n_lay = 32          # the caller's sub-config changed: so does the score
    assert estimate_performance(cfg) != first


@pytest.mark.parametrize("field, value", [("h", "wide"), ("vp", [2]), ("cap_fact", "x"), ("d", float("nan")),
                                          ("m", float("inf")), ("moe_dispatch", (1,))])
def test_a_field_that_holds_no_number_is_a_spec_error_naming_it(field, value):
    with pytest.raises(ndcost.SpecError, match=f"The '{field}' parameter of estimate_performance must be a number"):
        estimate_performance(Config(4, 2, **{field: value}))


class _Defaults:
    """ND fields as class attributes, a property and a slot-like descriptor: what getattr reads."""

    t = 2
    n_lay = 40

    @property
    def p(self) -> int:
        return self._p


def _fields_of(config) -> dict:
    return {name: getattr(config, name) for name in ("d", "t", "p", "m", "b", "s", "h", "a", "hff", "n_lay", "v")}


def test_class_attributes_properties_and_instance_values_read_as_getattr_does():
    from ndcost import nd

    config = _Defaults()
    config._p = 4
    for name, value in dict(d=2, m=8, b=1, s=2048, h=4096, a=32, hff=11008, v=32000).items():
        setattr(config, name, value)
    assert nd._values(config) == tuple(getattr(config, name, None) for name in nd.ND_FIELDS)
    config.t = 4                     # an instance value over the class default
    assert nd._values(config)[nd.ND_FIELDS.index("t")] == 4
    del config.t
    _Defaults.n_lay = 32             # the class changed mid-search: read as it is now
    try:
        assert nd._values(config)[nd.ND_FIELDS.index("n_lay")] == 32
        _Defaults.vp = 2             # a new class default: the namespace grew, the fields are re-read
        assert nd._values(config)[nd.ND_FIELDS.index("vp")] == 2
    finally:
        _Defaults.n_lay = 40
        del _Defaults.vp
    assert nd._values(config)[nd.ND_FIELDS.index("vp")] is None


def test_configs_with_their_own_attribute_lookup_or_slots_read_through_getattr():
    from ndcost import nd

    class Computed:
        def __getattr__(self, name):
            return {"t": 2, "p": 2}.get(name)

    class Slotted:
        __slots__ = ("t", "p")

        def __init__(self):
            self.t, self.p = 2, 4

    for config in (Computed(), Slotted()):
        assert nd._values(config) == tuple(getattr(config, name, None) for name in nd.ND_FIELDS)


def test_an_instance_keyed_config_prices_as_its_values_do():
    """The instance key: another attribute order, an attribute ND does not read, a bool for a count
    are other keys, each priced by its values (never another config's answer)."""
    first = Config(4, 2)
    assert estimate_performance(first) == pytest.approx(_reference(first), rel=1e-12)
    assert estimate_performance(Config(4, 2)) == estimate_performance(first)
    reordered = Config(4, 2)
    del reordered.d
    reordered.d = first.d
    assert nd._instance_key(reordered, "ascend-910b") != nd._instance_key(first, "ascend-910b")
    assert estimate_performance(reordered) == estimate_performance(first)
    assert estimate_performance(Config(4, 2, note="not an ND field")) == estimate_performance(first)
    for offset in ((1, -1), (True, -1), [1, -1], (1, -1)):   # typed: True is refused where 1 is not
        config = Config(4, 2, offset=offset)
        try:
            expected = _reference(config)
        except ndcost.SpecError:
            with pytest.raises(ndcost.SpecError):
                estimate_performance(config)
        else:
            assert estimate_performance(config) == pytest.approx(expected, rel=1e-12)


def test_a_class_that_gains_an_nd_field_is_read_through_it():
    class Bare:
        pass

    def make():
        config = Bare()
        config.__dict__.update(Config(4, 2).__dict__)
        del config.m
        return config

    config = make()
    config.m = 16
    plain = estimate_performance(config)
    Bare.m = 32                                # the class now states ND's m: no instance key any more
    try:
        more = make()
        assert nd._instance_key(more, "ascend-910b") is None
        assert estimate_performance(more) == pytest.approx(_reference(more), rel=1e-12)
        assert estimate_performance(more) != plain
    finally:
        del Bare.m
