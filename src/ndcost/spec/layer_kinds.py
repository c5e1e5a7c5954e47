"""Layer kinds: a layer's attention and FFN flavour and ND's op-count profile of it.

A :class:`~ndcost.spec.model.Model` lists the distinct kinds its layers use (``Model.kinds``); the
op counts are ND's per-layer op profile (docs/ND_MODEL.md §1.5 "Op profiles").
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..errors import SpecError, check_bool, check_choice, check_positive_int, is_finite_number
from ..limits import MAX_SEQ_LENGTH

__all__ = ["OpCounts", "LayerKind", "ATTENTION_KINDS", "FFN_KINDS", "MODULES"]

#: Attention flavours of a :class:`LayerKind` ("mamba": a Mamba-2 mixer; "none": an MLP-only block).
ATTENTION_KINDS = ("full", "mla", "linear", "mamba", "none", "mamba1")
#: FFN flavours of a :class:`LayerKind` ("none": a mixer-only block of a hybrid stack).
FFN_KINDS = ("dense", "moe", "none")
#: The submodules a layer kind can belong to: the language model, or a VLM's vision tower.
MODULES = ("text", "vision")


# --------------------------------------------------------------------------- OpCounts


@dataclass(frozen=True)
class OpCounts:
    """How many times each ND op class occurs in one layer (docs/ND_MODEL.md §1.5).

    The order of the fields is ND's profile order
    (attMM/attBMM/ffMM/softmax/dropout/normOp/gather/headCast/ffAct/linrec);
    :meth:`as_tuple` returns them in that order. Every count is a finite
    float >= 0 (ints are accepted and stored as floats).
    """

    attMM: float
    attBMM: float
    ffMM: float
    softmax: float
    dropout: float
    normOp: float
    gather: float
    headCast: float
    ffAct: float
    linrec: float

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if not is_finite_number(value) or value < 0:
                raise SpecError(f.name, "OpCounts", "be a finite number >= 0", value)
            object.__setattr__(self, f.name, float(value))

    @classmethod
    def full_attention(cls, *, gated_ffn: bool = True) -> OpCounts:
        """ND's default decoder profile 4/2/3/1/0/2/4/1/1/0 (docs/ND_MODEL.md §1.5,
        "default (kind decoder)"); used for full and MLA attention alike (the
        deepseek profile keeps the default counts). A 2-matmul GELU MLP
        (GPT-2/GPT-3/NeoX) has ffMM = 2 instead of SwiGLU's 3 (gate, up, down)."""
        return cls(4, 2, 3 if gated_ffn else 2, 1, 0, 2, 4, 1, 1, 0)

    @classmethod
    def linear_attention(cls, *, gated_ffn: bool = True) -> OpCounts:
        """ND's gated-DeltaNet profile 4/0/3/0/0/2/4/0/1/1 (docs/ND_MODEL.md §1.5,
        qwen3_5 ``linear_attention``): no score matrix (attBMM, softmax,
        headCast 0) and one chunked linear recurrence (linrec 1)."""
        return cls(4, 0, 3 if gated_ffn else 2, 0, 0, 2, 4, 0, 1, 1)

    @classmethod
    def vision_encoder(cls, *, gated_ffn: bool = False) -> OpCounts:
        """ND's vision-encoder profile 4/2/2/1/0/2/4/1/1/0 (docs/ND_MODEL.md §1.5, ``vision``), written
        for a 2-matmul GELU MLP (Qwen2-VL); a SwiGLU tower (Qwen2.5-VL) runs 3 FFN matmuls, as the
        decoder profiles count them."""
        return cls(4, 2, 3 if gated_ffn else 2, 1, 0, 2, 4, 1, 1, 0)

    @classmethod
    def hybrid_block(cls, attention: str, ffn: str, *, gated_ffn: bool = True) -> OpCounts:
        """A one-part block of a hybrid stack (:mod:`ndcost.spec.mamba`), counted as ND's profiles count
        the parts it has, with one norm: a Mamba-2 mixer's in/out projections and its scan (as
        linrec); attention's four matmuls and score matrix; an MLP's matmuls and activation. ND's
        tables have no such profile: ND units refuse these kinds, only seconds mode reads them."""
        mixer = {"mamba": (2, 0, 0, 0, 2, 0, 1), "mamba1": (4, 0, 0, 0, 2, 0, 1), "full": (4, 2, 1, 1, 2, 0, 0),
                 "mla": (4, 2, 1, 1, 2, 0, 0), "none": (0, 0, 0, 0, 0, 0, 0)}[attention]
        att_mm, att_bmm, softmax, head_cast, gather, _, linrec = mixer
        ff_mm = 0 if ffn == "none" else (3 if gated_ffn else 2)
        gather += 0 if ffn == "none" else 2
        norms = 1 if attention == "none" or ffn == "none" else 2
        return cls(att_mm, att_bmm, ff_mm, softmax, 0, norms, gather, head_cast, 0 if ffn == "none" else 1, linrec)

    def as_tuple(self) -> tuple[float, ...]:
        """The counts in ND's profile order."""
        return tuple(getattr(self, f.name) for f in fields(self))

    def as_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


# --------------------------------------------------------------------------- LayerKind


@dataclass(frozen=True)
class LayerKind:
    """One distinct kind of layer in a model's stack.

    ``name`` is unique within a model: ``"dense"``/``"moe"`` for a stack of
    full (or MLA) attention layers, ``"<attention>_<ffn>"`` (``"linear_moe"``,
    ``"full_moe"``, ``"sliding_dense"``, ...) when the model mixes attention flavours
    or windows; a vision tower's blocks are ``"vision"`` (and ``"vision_window"`` for
    its windowed blocks), with ``module = "vision"``. ``window`` is the keys a
    sliding-window text layer's query attends to (0: the whole causal prefix);
    ``chunked``: the window is a fixed chunk (Llama 4's chunked attention, causal
    inside blocks of ``window`` tokens) rather than sliding.
    """

    name: str
    attention: str
    ffn: str
    ops: OpCounts
    module: str = "text"
    window: int = 0
    chunked: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise SpecError("name", "LayerKind", "be a non-empty string", self.name)
        check_choice(self.attention, "attention", "LayerKind", ATTENTION_KINDS)
        check_choice(self.ffn, "ffn", "LayerKind", FFN_KINDS)
        if not isinstance(self.ops, OpCounts):
            raise SpecError("ops", "LayerKind", "be an OpCounts", self.ops)
        check_choice(self.module, "module", "LayerKind", MODULES)
        check_positive_int(self.window, "window", "LayerKind", minimum=0, maximum=MAX_SEQ_LENGTH)
        check_bool(self.chunked, "chunked", "LayerKind")
