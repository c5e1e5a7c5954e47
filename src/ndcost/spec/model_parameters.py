"""How many parameters a Model holds, per layer kind and in total.

Every count follows the Transformers modelling code of the family: each nn.Linear is in*out
weights (+out bias where that code passes bias=True), each norm is one weight vector (RMSNorm) or
a weight and a bias (LayerNorm). The per-layer split (non-expert, routed, shared) is the one ND's
memory model shards differently (docs/ND_MODEL.md §3.3).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import SpecError
from .mamba import mamba1_mixer_parameters, mamba_mixer_parameters

__all__ = ["ParamCount", "ModelParameters"]

#: Gemma3DecoderLayer), not two.
_FOUR_NORM_FAMILIES = ("gemma2", "gemma3")
#: Families that put biases on q/k/v but not on o_proj (modeling_qwen2, modeling_qwen2_moe).
_QKV_BIAS_ONLY_FAMILIES = ("qwen2", "qwen2_moe", "glm4_moe")   # and Glm4MoeAttention's o_proj: bias=False


@dataclass(frozen=True)
class ParamCount:
    """Parameters of a model: ``total``, and ``active`` per token (the routed
    experts a token visits -- top-k of them -- plus the shared experts and
    every non-expert parameter, embeddings and output head included)."""

    total: int
    active: int


class ModelParameters:
    """The parameter counts of :class:`~ndcost.spec.model.Model` (a base of it: these methods read its fields
    and its layer kinds)."""

    # Every count below follows the Transformers modelling code of the family
    # (llama, qwen2, qwen3, qwen3_moe, qwen3_next, mixtral, deepseek_v3, gpt2,
    # gpt_neox): each nn.Linear is in*out weights (+out bias where that code
    # passes bias=True), each norm is one weight vector (RMSNorm) or a weight
    # and a bias (LayerNorm).

    def _norm_parameters(self, width: int) -> int:
        return width if self.norm == "rmsnorm" else 2 * width

    def _ffn_parameters(self, width: int) -> int:
        """One MLP of the given intermediate width."""
        h = self.hidden_size
        if self.gated_ffn:  # SwiGLU: gate_proj, up_proj (h -> w), down_proj (w -> h)
            weights = 3 * h * width
            biases = (2 * width + h) if self.mlp_bias else 0
        else:  # GELU MLP: fc (h -> w), proj (w -> h)
            weights = 2 * h * width
            biases = (width + h) if self.mlp_bias else 0
        return weights + biases

    def _full_attention_parameters(self) -> int:
        h, heads, kv_heads, d = self.hidden_size, self.num_attention_heads, self.num_key_value_heads, self.head_dim
        bias = self.attention_bias
        # Qwen3-Next's gated attention projects a sigmoid output gate together
        # with the query: q_proj has 2 * heads * head_dim outputs.
        q_out = heads * d * (2 if self.attn_output_gate else 1)
        params = h * q_out + (q_out if bias else 0)  # q_proj
        params += 2 * (h * kv_heads * d + (kv_heads * d if bias else 0))  # k_proj, v_proj
        # Qwen2 puts biases on q/k/v only (bias=True fixed in its code); the
        # other families use attention_bias for o_proj too.
        output_bias = bias and self.family not in _QKV_BIAS_ONLY_FAMILIES
        params += heads * d * h + (h if output_bias else 0)  # o_proj
        if self.qk_norm and self.family == "olmo2":
            # modeling_olmo2: q_norm over the whole query projection, k_norm over the key projection
            params += self._norm_parameters(heads * d) + self._norm_parameters(kv_heads * d)
        elif self.qk_norm:  # q_norm, k_norm: one norm over head_dim each, shared by all heads
            params += 2 * self._norm_parameters(d)
        if self.family == "gpt_oss":
            params += heads  # modeling_gpt_oss: self.sinks, one learned sink logit per head
        return params

    def _mla_parameters(self) -> int:
        """DeepSeek-V3 multi-head latent attention (modeling_deepseek_v3)."""
        h, heads = self.hidden_size, self.num_attention_heads
        bias = self.attention_bias
        qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank > 0:
            params = h * self.q_lora_rank + (self.q_lora_rank if bias else 0)  # q_a_proj
            params += self._norm_parameters(self.q_lora_rank)  # q_a_layernorm
            params += self.q_lora_rank * heads * qk_head_dim  # q_b_proj (no bias)
        else:
            params = h * heads * qk_head_dim  # q_proj (no bias)
        kv_a_out = self.kv_lora_rank + self.qk_rope_head_dim
        params += h * kv_a_out + (kv_a_out if bias else 0)  # kv_a_proj_with_mqa
        params += self._norm_parameters(self.kv_lora_rank)  # kv_a_layernorm
        params += self.kv_lora_rank * heads * (self.qk_nope_head_dim + self.v_head_dim)  # kv_b_proj (no bias)
        params += heads * self.v_head_dim * h + (h if bias else 0)  # o_proj
        return params

    def _linear_attention_parameters(self) -> int:
        """Qwen3-Next gated DeltaNet (Qwen3NextGatedDeltaNet), no biases."""
        h = self.hidden_size
        key_dim = self.linear_num_key_heads * self.linear_key_head_dim
        value_dim = self.linear_num_value_heads * self.linear_value_head_dim
        params = h * (2 * key_dim + 2 * value_dim)  # in_proj_qkvz
        params += h * 2 * self.linear_num_value_heads  # in_proj_ba
        params += (2 * key_dim + value_dim) * self.linear_conv_kernel_dim  # conv1d, depthwise, no bias
        params += 2 * self.linear_num_value_heads  # dt_bias, A_log
        params += self.linear_value_head_dim  # norm (gated RMSNorm over one head)
        params += value_dim * h  # out_proj
        return params

    def _router_parameters(self) -> int:
        params = self.num_experts * self.hidden_size  # gate: h -> num_experts
        if self.family == "gpt_oss":
            params += self.num_experts  # GptOssTopKRouter keeps a bias per expert
        if self.family in ("deepseek_v3", "glm4_moe"):
            # noaux_tc routing keeps a per-expert e_score_correction_bias in the
            # checkpoint (DeepSeek-V3 report §2.1.2, auxiliary-loss-free balancing).
            params += self.num_experts
        return params

    def kind_parameters(self, kind_index: int) -> tuple[int, int, int]:
        """Parameters of one layer of ``kinds[kind_index]``:
        (non_expert, routed experts -- all of them, shared experts).

        non_expert = attention + the layer's two norms + the dense FFN (dense
        kind) or the router and shared-expert gate (MoE kind) -- the split ND's
        memory model shards three ways (docs/ND_MODEL.md §3.3, ``num_params_layer``).
        """
        kinds = self.kinds
        if isinstance(kind_index, bool) or not isinstance(kind_index, int) or not 0 <= kind_index < len(kinds):
            rule = f"be an integer in [0, {len(kinds) - 1}]"
            raise SpecError("kind_index", "Model.kind_parameters", rule, kind_index)
        kind = kinds[kind_index]
        if kind.module == "vision":
            return self.vision.block_parameters(), 0, 0
        if kind.attention == "linear":
            non_expert = self._linear_attention_parameters()
        elif kind.attention == "mla":
            non_expert = self._mla_parameters()
        elif kind.attention == "mamba":
            non_expert = mamba_mixer_parameters(self)
        elif kind.attention == "mamba1":
            non_expert = mamba1_mixer_parameters(self)
        elif kind.attention == "none":
            non_expert = 0
        else:
            non_expert = self._full_attention_parameters()
        non_expert += self.norms_per_layer(kind_index) * self._norm_parameters(self.hidden_size)
        if kind.ffn == "none":
            return non_expert, 0, 0
        if kind.ffn == "dense":
            return non_expert + self._ffn_parameters(self.intermediate_size), 0, 0
        non_expert += self._router_parameters()
        if self.shared_expert_gate:
            non_expert += self.hidden_size  # shared_expert_gate: h -> 1, no bias
        routed = self.num_experts * self._ffn_parameters(self.moe_intermediate_size)
        shared_width = self.shared_expert_intermediate_size
        shared = self._ffn_parameters(shared_width) if shared_width else 0
        return non_expert, routed, shared

    def norms_per_layer(self, kind_index: int) -> int:
        """Norms of one layer of ``kinds[kind_index]``: one per block of a hybrid stack (NemotronHBlock),
        four in Gemma 2/3 (before and after attention and FFN), else input_layernorm and
        post_attention_layernorm."""
        kind = self.kinds[kind_index]
        if kind.attention == "none" or kind.ffn == "none":
            return 1
        return 4 if self.family in _FOUR_NORM_FAMILIES else 2

    def _kind_active_parameters(self, kind_index: int) -> int:
        non_expert, routed, shared = self.kind_parameters(kind_index)
        if routed:
            routed = routed // self.num_experts * self.num_experts_per_tok  # top-k experts per token
        return non_expert + routed + shared

    def embedding_parameters(self) -> int:
        """Token embedding table, plus the learned position table (GPT-2/3)."""
        return (self.vocab_size + self.learned_position_embeddings) * self.hidden_size

    def output_parameters(self) -> int:
        """The LM head (vocab x hidden, no bias in any supported family); 0 when
        tied to the embedding."""
        return 0 if self.tie_word_embeddings else self.vocab_size * self.hidden_size

    def final_norm_parameters(self) -> int:
        """The norm after the last body layer (it sits with the output head)."""
        return self._norm_parameters(self.hidden_size)

    def mtp_extra_parameters(self, *, include_shared_copies: bool = False) -> int:
        """MTP parameters beyond the MTP transformer layers, over all MTP depths.

        Per MTP module (DeepSeek-V3 report §2.2; the checkpoint's layer 61):
        the norms of the hidden state and of the next token's embedding
        (hnorm, enorm), the projection of their concatenation eh_proj
        (2h -> h, no bias) and the norm before the output head
        (shared_head.norm). The embedding and the output head are *shared*
        with the main model, so they are not counted -- unless
        ``include_shared_copies``, which adds the copies the published
        checkpoint stores with each MTP module (that is how DeepSeek's "14B MTP
        module" is counted).
        """
        h = self.hidden_size
        per_module = 3 * self._norm_parameters(h) + 2 * h * h
        if include_shared_copies:
            per_module += 2 * self.vocab_size * h
        return self.num_nextn_predict_layers * per_module

    def mtp_layer_parameters(self) -> int:
        """The transformer layers of the MTP modules (all depths)."""
        order = self.layer_kinds_in_order[self.num_hidden_layers:]
        return sum(sum(self.kind_parameters(i)) for i in order)

    def parameter_count(self, *, include_mtp: bool = False) -> ParamCount:
        """Total and per-token active parameters.

        Excludes the MTP modules by default: published totals are of the main
        model (DeepSeek-V3: 671B without, 685B with the MTP module, per its
        README), and MTP is a training-time head. ``include_mtp=True`` adds the
        MTP layers (active: their top-k experts) and :meth:`mtp_extra_parameters`.
        """
        counts = self.kind_counts()
        total = active = 0
        for kind_index, (body, mtp) in enumerate(counts):
            layers = body + (mtp if include_mtp else 0)
            total += layers * sum(self.kind_parameters(kind_index))
            active += layers * self._kind_active_parameters(kind_index)
        outside_layers = self.embedding_parameters() + self.output_parameters() + self.final_norm_parameters()
        if include_mtp:
            outside_layers += self.mtp_extra_parameters()
        if self.vision is not None:   # every image token runs the whole tower
            outside_layers += self.vision.total_parameters()
        return ParamCount(total=total + outside_layers, active=active + outside_layers)
