"""Joint checks of (model, spec, cluster): what no spec can check alone.

:func:`validate` raises the first broken rule as a
:class:`~ndcost.errors.SpecError` naming the parameter; :func:`explain`
returns every broken rule in words. An :class:`~ndcost.spec.exec_spec.ExecSpec`
checks its own fields when built, so both assume a valid spec and model.

The rules, in the order they are checked:

1. dp*tp*pp*cp equals the cluster's device count (ND's
   ``strategy_num_devices``, docs/ND_MODEL.md §1.3).
2. tp divides num_attention_heads, and num_key_value_heads unless the model
   is MLA (its latent KV is not split by heads); on a model with linear
   (gated DeltaNet) layers, tp divides their key and value heads too.
3. Experts (docs/ND_MODEL.md §3.9 C1-C2, §4.1 ``moe_valid``; Megatron-LM
   ``parallel_state.initialize_model_parallel``):
   a dense model runs ep = 1, the default dispatcher and no expert all-to-all overlap;
   ep divides num_experts; Megatron-Core's EP overlap (ep_overlap '1f1b') runs at most
   one MTP layer;
   with etp stated, ep*etp divides dp*cp*tp (Megatron's expert grid: etp*ep*pp
   divides the world size); with etp None, experts run at ND's t_exp
   (derive step 2): ep divides dp (experts at tp), or, when ep > dp, ep
   divides dp*tp (EP borrows the TP ranks, experts at tp 1) -- ND's d_exp is
   then exact and ep*t_exp divides dp*cp*tp as Megatron requires;
   t_exp divides moe_intermediate_size.
4. pp <= num_hidden_layers + MTP layers, and vpp*pp <= the same (ND's
   bound PP <= total_layers // vpp, docs/ND_MODEL.md §4.1).
5. micro_batch_num >= pp for the 1F1B family (1f1b, interleaved, seq1f1b,
   zero_bubble_v, and the DualPipe schedules, whose own 2*pp ExecSpec checks;
   ND: MB >= PP, §4.1), and a multiple of pp for the
   interleaved schedule (Megatron's requirement).
6. Sequence: with sequence parallelism (tp > 1) seq_length is divisible by
   tp*cp (each CP rank's tokens split over TP); ring CP needs seq_length
   divisible by 2*cp; Ulysses needs num_key_value_heads divisible by tp*cp
   and seq_length by cp (docs/ND_MODEL.md §3.8).
   A vision tower shares the strategy (ND's ``set_shared_strategy``): tp
   divides its heads, and its tokens obey the same sequence rules; Seq1F1B,
   which splits the text sequence, does not run with one.
7. Layout (docs/ND_MODEL.md §1.6): an offset leaves no stage or chunk with a
   negative layer count and places exactly the layers the offset counts
   (num_hidden_layers, + MTP layers if mtp_in_offset, + 2 if
   emb_out_in_offset); a pp_partition sums to the same count; recompute
   ranges lie within num_hidden_layers + MTP layers (derive step 6).
8. Cluster: tp <= devices_per_node unless ``allow_cross_node_tp``; fp8
   needs a device with an fp8 peak.
"""
from __future__ import annotations

from typing import Any, Iterator

from ..spec.device import Cluster
from ..errors import SpecError
from ..spec.exec_spec import ExecSpec
from ..spec.model import Model

__all__ = ["validate", "explain", "offset_layer_count", "offset_chunk_counts", "pipeline_depth_error"]

_OWNER = "ExecSpec"
# Schedules of the 1F1B family: the first stage runs up to pp warm-up
# forwards before its first backward, so fewer micro-batches than stages
# never reach the steady state (ND refuses MB < PP, docs/ND_MODEL.md §4.1).
_ONE_F_ONE_B_FAMILY = ("1f1b", "interleaved", "seq1f1b", "zero_bubble_v", "dualpipe", "dualpipev")


def offset_layer_count(model: Any, spec: ExecSpec) -> int:
    """The layers an offset (or a pp_partition) places, ND's ``lay``
    (docs/ND_MODEL.md §1.6): body layers, + MTP layers if mtp_in_offset, + 2
    (embedding and output) if emb_out_in_offset."""
    count = model.num_hidden_layers
    if spec.mtp_in_offset:
        count += model.num_nextn_predict_layers
    if spec.emb_out_in_offset:
        count += 2
    return count


def offset_chunk_counts(model: Any, spec: ExecSpec) -> tuple[tuple[int, ...], ...] | None:
    """Layers of each chunk of each stage as ND's partition generator assigns
    them from the offset, ``counts[chunk][stage]`` (docs/ND_MODEL.md §1.6), before
    its clamp to the layers remaining; None without an offset.

    per = lay // (pp*vpp). A 2-D offset adds ``offset[v][s]``; a 1-D one gives
    ``offset[s] // vpp`` to each chunk but the last, which also gets
    ``offset[s] % vpp`` (Python's floor division, as ND's).
    """
    offset = spec.offset
    if offset is None:
        return None
    pp, vpp = spec.pp, spec.vpp
    per = offset_layer_count(model, spec) // (pp * vpp)
    if isinstance(offset[0], tuple):
        return tuple(tuple(per + offset[v][s] for s in range(pp)) for v in range(vpp))
    rows = []
    for v in range(vpp):
        last = v == vpp - 1
        rows.append(tuple(per + offset[s] // vpp + (offset[s] % vpp if last else 0) for s in range(pp)))
    return tuple(rows)


def _cluster_owner(cluster: Any) -> str:
    return f"ExecSpec on Cluster({cluster.device.name!r}, num_devices={cluster.num_devices})"


def _violations(model: Any, spec: ExecSpec, cluster: Any, allow_cross_node_tp: bool) -> Iterator[SpecError]:
    """Every broken rule, in the order of the module docstring."""
    # Rule 1: the strategy fills the cluster exactly.
    if cluster is not None and spec.num_devices != cluster.num_devices:
        yield SpecError("dp*tp*pp*cp", _cluster_owner(cluster),
                        f"equal num_devices ({cluster.num_devices})", spec.num_devices)

    yield from _head_rules(model, spec)
    yield from _expert_rules(model, spec)
    yield from _pipeline_rules(model, spec)
    yield from _sequence_rules(model, spec)
    yield from _vision_rules(model, spec)
    yield from _layout_rules(model, spec)

    # Rule 8: the cluster's own limits.
    if cluster is not None:
        per_node = cluster.device.devices_per_node
        if not allow_cross_node_tp and spec.tp > per_node:
            yield SpecError("tp", _cluster_owner(cluster),
                            f"be at most devices_per_node ({per_node}) unless allow_cross_node_tp=True", spec.tp)
        if spec.precision == "fp8" and "fp8" not in cluster.device.peak_flops:
            known = ", ".join(repr(dtype) for dtype in cluster.device.peak_flops)
            yield SpecError("precision", _cluster_owner(cluster),
                            f"name a dtype the device has a peak for ({known})", spec.precision)


def _head_rules(model: Any, spec: ExecSpec) -> Iterator[SpecError]:
    tp = spec.tp
    if model.num_attention_heads % tp:
        yield SpecError("tp", _OWNER, f"divide num_attention_heads ({model.num_attention_heads})", tp)
    # MLA compresses K and V into one latent that TP does not split by head.
    if not model.is_mla and model.num_key_value_heads % tp:
        yield SpecError("tp", _OWNER, f"divide num_key_value_heads ({model.num_key_value_heads})", tp)
    if model.has_linear_attention:
        # Gated DeltaNet layers split their key and value heads over TP.
        for name in ("linear_num_key_heads", "linear_num_value_heads"):
            heads = getattr(model, name)
            if heads % tp:
                yield SpecError("tp", _OWNER, f"divide {name} ({heads})", tp)
    if model.has_mamba:
        # Megatron's Mamba-2 mixer splits its heads and B/C groups over TP (mamba_mixer.py), Mamba-1 d_inner.
        for name, heads in model.mamba_tp_splits:
            if heads % tp:
                yield SpecError("tp", _OWNER, f"divide {name} ({heads})", tp)


def _expert_rules(model: Any, spec: ExecSpec) -> Iterator[SpecError]:
    dp, tp, cp, ep = spec.dp, spec.tp, spec.cp, spec.ep
    if not model.is_moe:
        if ep != 1:
            yield SpecError("ep", _OWNER, "be 1 for a dense model (num_experts = 0)", ep)
        # a MoE option named for a dense model is refused, not ignored
        if spec.moe_dispatcher != "alltoall":
            yield SpecError("moe_dispatcher", _OWNER, "be 'alltoall' (the default) for a dense model "
                            "(no tokens to dispatch)", spec.moe_dispatcher)
        if spec.ep_overlap != "none":
            yield SpecError("ep_overlap", _OWNER, "be 'none' for a dense model (no expert all-to-all)",
                            spec.ep_overlap)
        if spec.moe_device_limit:
            yield SpecError("moe_device_limit", _OWNER, "be 0 for a dense model (no experts to route to)",
                            spec.moe_device_limit)
        return
    if spec.ep_overlap == "1f1b" and model.num_nextn_predict_layers > 1:
        # Megatron-Core transformer_config.py: "MTP supports at most one layer when enabling
        # overlap_moe_expert_parallel_comm"
        yield SpecError("ep_overlap", _OWNER, "be '1f1b' only with at most one MTP layer (Megatron-Core's EP "
                        f"overlap; the model has {model.num_nextn_predict_layers})", spec.ep_overlap)
    # C1 (docs/ND_MODEL.md §3.9): every EP rank holds whole experts.
    if model.num_experts % ep:
        yield SpecError("ep", _OWNER, f"divide num_experts ({model.num_experts})", ep)
    if spec.etp is not None:
        # Megatron: expert_tensor_parallel * expert_model_parallel * pp must
        # divide the world size, i.e. ep*etp divides dp*cp*tp.
        t_exp = spec.etp
        if (dp * cp * tp) % (ep * t_exp):
            yield SpecError("ep*etp", _OWNER, f"divide dp*cp*tp (= {dp * cp * tp})", ep * t_exp)
        width_parameter = "etp"
    else:
        # ND derive step 2: experts at tp while ep <= dp (d_exp = dp // ep),
        # at tp 1 once EP borrows the TP ranks (d_exp = dp*tp // ep).
        if ep <= dp:
            t_exp = tp
            if dp % ep:
                yield SpecError("ep", _OWNER, f"divide dp ({dp}) (experts at tp; or state etp)", ep)
        else:
            t_exp = 1
            if (dp * tp) % ep:
                yield SpecError("ep", _OWNER,
                                f"divide dp*tp (= {dp * tp}) when ep > dp (experts at tp 1; or state etp)", ep)
        width_parameter = "tp"
    # C2 (docs/ND_MODEL.md §3.9): hff_exp % t_exp == 0.
    width = model.moe_intermediate_size
    if width % t_exp:
        yield SpecError(width_parameter, _OWNER,
                        f"divide moe_intermediate_size ({width}) (the experts' TP degree)", t_exp)
    # device-limited routing (DeepSeek-V2 §2.2.1): the token's top-k among the experts of its M ranks
    limit = spec.moe_device_limit
    if limit and limit * (model.num_experts // ep) < model.num_experts_per_tok:
        yield SpecError("moe_device_limit", _OWNER, f"leave at least num_experts_per_tok "
                        f"({model.num_experts_per_tok}) experts on its ranks (x num_experts/ep = "
                        f"{model.num_experts // ep} a rank)", limit)


def pipeline_depth_error(model: Any, pp: int, vpp: int) -> SpecError | None:
    """Rule 4, the pipeline's depth against the layers: the error, or None when pp*vpp chunks
    fit the model. It costs nothing, and everything that builds a layout (work and memory
    proportional to pp*vpp) checks it first."""
    layers = model.num_layers_with_mtp
    # ND's search bound PP <= total_layers // vpp (docs/ND_MODEL.md §4.1).
    if pp > layers:
        return SpecError("pp", _OWNER, f"be at most the layer count ({layers}, MTP layers included)", pp)
    if vpp > 1 and vpp * pp > layers:
        return SpecError("vpp", _OWNER, f"keep vpp*pp within the layer count ({layers}, MTP layers included)", vpp)
    return None


def _pipeline_rules(model: Any, spec: ExecSpec) -> Iterator[SpecError]:
    pp = spec.pp
    depth = pipeline_depth_error(model, pp, spec.vpp)
    if depth is not None:
        yield depth
    if pp > 1:
        micro_batches = spec.resolved_micro_batch_num
        schedule = spec.schedule
        if schedule in _ONE_F_ONE_B_FAMILY and micro_batches < pp:
            yield SpecError("micro_batch_num", _OWNER,
                            f"be >= pp ({pp}) for the {schedule!r} schedule", micro_batches)
        elif schedule == "interleaved" and micro_batches % pp:
            yield SpecError("micro_batch_num", _OWNER,
                            f"be a multiple of pp ({pp}) for the 'interleaved' schedule", micro_batches)


def _sequence_rules(model: Any, spec: ExecSpec) -> Iterator[SpecError]:
    s, tp, cp = spec.seq_length, spec.tp, spec.cp
    if model.has_mamba and cp > 1:
        yield SpecError("cp", _OWNER, "be 1 on a model with Mamba-2 mixers (their context parallelism is not priced)",
                        cp)
    if spec.sequence_parallel and tp > 1 and s % (tp * cp):
        divisor = f"tp ({tp})" if cp == 1 else f"tp*cp (= {tp * cp})"
        yield SpecError("seq_length", _OWNER, f"be divisible by {divisor} with sequence parallelism", s)
    if cp > 1 and spec.cp_algo != "ulysses":
        # docs/ND_MODEL.md §3.8: the ring splits the sequence into 2*cp chunks.
        if s % (2 * cp):
            yield SpecError("seq_length", _OWNER,
                            f"be divisible by 2*cp (= {2 * cp}) for ring context parallelism", s)
    elif cp > 1:
        # docs/ND_MODEL.md §3.8: Ulysses all-to-alls heads, so each of the tp*cp
        # ranks needs whole KV heads; each holds s/cp tokens before it.
        kv_heads = model.num_key_value_heads
        if kv_heads % (tp * cp):
            yield SpecError("tp*cp", _OWNER,
                            f"divide num_key_value_heads ({kv_heads}) for Ulysses context parallelism", tp * cp)
        if s % cp:
            yield SpecError("seq_length", _OWNER,
                            f"be divisible by cp ({cp}) for Ulysses context parallelism", s)


def _vision_rules(model: Any, spec: ExecSpec) -> Iterator[SpecError]:
    tower = model.vision
    if tower is None:
        return
    tp, cp, tokens = spec.tp, spec.cp, tower.tokens
    if tower.num_heads % tp:
        yield SpecError("tp", _OWNER, f"divide the vision tower's num_heads ({tower.num_heads})", tp)
    if spec.sequence_parallel and tp > 1 and tokens % (tp * cp):
        yield SpecError("vision.tokens", "Model", f"be divisible by tp*cp (= {tp * cp}) with sequence parallelism",
                        tokens)
    if cp > 1 and spec.cp_algo != "ulysses" and tokens % (2 * cp):
        yield SpecError("vision.tokens", "Model", f"be divisible by 2*cp (= {2 * cp}) for ring context parallelism",
                        tokens)
    elif cp > 1 and spec.cp_algo == "ulysses":
        if tower.num_heads % (tp * cp):
            yield SpecError("tp*cp", _OWNER, f"divide the vision tower's num_heads ({tower.num_heads}) for Ulysses "
                            "context parallelism", tp * cp)
        if tokens % cp:
            yield SpecError("vision.tokens", "Model", f"be divisible by cp ({cp}) for Ulysses context parallelism",
                            tokens)
    if spec.schedule == "seq1f1b":
        yield SpecError("pp_schedule", _OWNER, "not be 'seq1f1b' for a model with a vision tower (Seq1F1B splits "
                        "the text sequence; the tower's bidirectional attention needs all its patches)", "seq1f1b")


def _layout_rules(model: Any, spec: ExecSpec) -> Iterator[SpecError]:
    if pipeline_depth_error(model, spec.pp, spec.vpp) is not None:
        # Rule 4 already refuses the pipeline; counting layers per chunk of it would take work
        # proportional to pp*vpp and say nothing more.
        return
    placed = offset_layer_count(model, spec)
    counts = offset_chunk_counts(model, spec)
    if counts is not None:
        per = placed // (spec.pp * spec.vpp)
        negative = [(v, s, n) for v, row in enumerate(counts) for s, n in enumerate(row) if n < 0]
        if negative:
            v, s, n = negative[0]
            yield SpecError("offset", _OWNER,
                            f"leave no stage or chunk with fewer than 0 layers "
                            f"(stage {s}, chunk {v} gets {per} + offset = {n})", spec.offset)
        total = sum(sum(row) for row in counts)
        if total != placed:
            yield SpecError("offset", _OWNER,
                            f"place exactly {placed} layers ({per} per chunk plus the offset places {total})",
                            spec.offset)
    if spec.pp_partition is not None and sum(spec.pp_partition) != placed:
        yield SpecError("pp_partition", _OWNER, f"sum to the layer count ({placed})", spec.pp_partition)
    if isinstance(spec.recompute, tuple):
        # ND derive step 6: ranges are checked against n_lay + n_mtp.
        layers = model.num_layers_with_mtp
        for recompute_range in spec.recompute:
            if recompute_range.end > layers:
                yield SpecError("recompute", _OWNER,
                                f"hold ranges within layers 0..{layers - 1} (MTP layers included)",
                                recompute_range)


def _check_arguments(model: Any, spec: Any, cluster: Any, owner: str) -> None:
    if not isinstance(model, Model):
        raise SpecError("model", owner, "be a Model", model)
    if not isinstance(spec, ExecSpec):
        raise SpecError("spec", owner, "be an ExecSpec", spec)
    if cluster is not None and not isinstance(cluster, Cluster):
        raise SpecError("cluster", owner, "be a Cluster or None", cluster)


def validate(model: Any, spec: ExecSpec, cluster: Any = None, *, allow_cross_node_tp: bool = True) -> None:
    """Raise the first rule (model, spec, cluster) break, as a SpecError naming its parameter.

    Args:
        model: A :class:`~ndcost.spec.model.Model`.
        spec: The strategy.
        cluster: A :class:`~ndcost.spec.device.Cluster`, or None to skip the cluster rules.
        allow_cross_node_tp: False refuses tp above the devices of one node
            (a search's rule: TP traffic is the heaviest and wants the
            scale-up link).
    """
    _check_arguments(model, spec, cluster, "validate")
    for error in _violations(model, spec, cluster, allow_cross_node_tp):
        raise error


def explain(model: Any, spec: ExecSpec, cluster: Any = None, *, allow_cross_node_tp: bool = True) -> list[str]:
    """Every rule (model, spec, cluster) breaks, in words; empty when it is valid."""
    _check_arguments(model, spec, cluster, "explain")
    return [str(error) for error in _violations(model, spec, cluster, allow_cross_node_tp)]
