"""Hugging Face transformers' own modules as the references of controls (issue 33).

The controls that name this file (`python: [../../python/hf_references.py]`) are twins of C++
controls: the same probe, seeds and expectation, with the reference (and for R3's twin the
production too) taken from the installed transformers instead of kcert's C++ replay of its cast
points. They run in the
nightly through `python -m kcert` workers (the kcert binary describes this file: docs/python.md)
and SKIP, with the reason, where transformers cannot be imported (Debian's python3-torch 1.13 is
older than transformers 5 supports). scripts/install-deps.sh pins the release for the PyPI
pass; the results record it (environment: front_end.modules.transformers).

Under kcert's exact policy (the fp64 oracle, the algebra gate) `@kcert.exact_casts` promotes the
modules' own `.to(torch.float32)` casts to fp64; under bf16 they run as transformers has them.
"""
import hashlib
import os

import torch

import kcert

try:
    import transformers
    from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
    from transformers.models.llama.configuration_llama import LlamaConfig
    from transformers.models.llama.modeling_llama import (LlamaMLP, LlamaRMSNorm, LlamaRotaryEmbedding,
                                                          apply_rotary_pos_emb, eager_attention_forward)
    MISSING = None
    RELEASE = transformers.__version__
except Exception as e:  # ImportError, or a transformers that refuses this torch
    MISSING = f"transformers cannot be imported here ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
    RELEASE = "not installed"

# Every result records the kernel's version: here the transformers release and this file's
# digest (the kcert binary's environment is its own; docs/python.md).
with open(__file__, "rb") as _f:
    VERSION = f"transformers {RELEASE}; {os.path.basename(__file__)}@sha256:{hashlib.sha256(_f.read()).hexdigest()[:12]}"

try:
    from torch.func import functional_call
except ImportError:  # torch < 2.0
    from torch.nn.utils.stateless import functional_call


def run_module(cls, inputs, eps):
    """The module's forward with kcert's weight as its parameter (autograd reaches it, so a
    backward case gets dW too)."""
    x, w = inputs["x"], inputs["w"]
    module = cls(x.shape[-1], eps=eps).to(device=x.device, dtype=w.dtype)
    return functional_call(module, {"weight": w}, (x,))


@kcert.variant("rmsnorm", "transformers_llama_rmsnorm", params={"eps": 1e-6}, unavailable=MISSING, version=VERSION,
               description=f"transformers {RELEASE} LlamaRMSNorm, imported")
@kcert.exact_casts
def transformers_llama_rmsnorm(inputs, p, params):
    return run_module(LlamaRMSNorm, inputs, params["eps"])


@kcert.variant("rmsnorm", "transformers_gemma_rmsnorm", params={"eps": 1e-6}, unavailable=MISSING, version=VERSION,
               description=f"transformers {RELEASE} GemmaRMSNorm, imported")
@kcert.exact_casts
def transformers_gemma_rmsnorm(inputs, p, params):
    return run_module(GemmaRMSNorm, inputs, params["eps"])


def llama_rotary(x, pos, params):
    """transformers' LlamaRotaryEmbedding for x [B, tokens, heads, head_dim] at positions pos."""
    heads, head_dim = x.shape[-2], x.shape[-1]
    config = LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, head_dim=head_dim,
                         rope_parameters={"rope_type": "default", "rope_theta": params["base"]},
                         max_position_embeddings=int(pos.max().item()) + 1)
    return LlamaRotaryEmbedding(config).to(device=x.device)


@kcert.variant("rope", "transformers_apply_rotary_pos_emb", params={"base": 10000.0}, unavailable=MISSING, version=VERSION,
               description=f"transformers {RELEASE} LlamaRotaryEmbedding (fp32 tables) + apply_rotary_pos_emb "
                           "on the fp32 values, one rounding")
@kcert.exact_casts
def transformers_apply_rotary_pos_emb(inputs, p, params):
    # x [B, tokens, heads, head_dim]; pos [tokens]. The tables are the module's, made for an fp32
    # input (an input in W would round them to W: R3's arrangement, the variant below).
    x, pos = inputs["x"], inputs["pos"]
    u = p.up(x)
    cos, sin = llama_rotary(x, pos, params)(u, pos.unsqueeze(0))  # [1, tokens, head_dim] in u's dtype
    q_embed, _ = apply_rotary_pos_emb(u, u, cos, sin, unsqueeze_dim=2)
    return p.round_w(q_embed)


@kcert.variant("rope", "transformers_apply_rotary_pos_emb_model_dtype", params={"base": 10000.0}, unavailable=MISSING,
               version=VERSION,
               description=f"transformers {RELEASE} LlamaRotaryEmbedding + apply_rotary_pos_emb as a bf16 Llama with "
                           "its fp32 inv_freq runs them: the fp32 tables cast to the input's dtype (cos.to(x.dtype)) and "
                           "the rotation done in it, each multiply and add rounding (R3's arrangement)")
@kcert.exact_casts
def transformers_apply_rotary_pos_emb_model_dtype(inputs, p, params):
    # The module is given x as the model holds it (W), so its forward returns cos and sin in W and
    # apply_rotary_pos_emb multiplies and adds in W. Under the exact policy x is fp64 and so is
    # everything (exact_casts promotes the module's own .float() casts).
    x, pos = inputs["x"], inputs["pos"]
    cos, sin = llama_rotary(x, pos, params)(x, pos.unsqueeze(0))
    q_embed, _ = apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=2)
    return p.round_w(q_embed)


@kcert.variant("glu", "transformers_llama_mlp", unavailable=MISSING, version=VERSION,
               description=f"transformers {RELEASE} LlamaMLP up to down_proj: act_fn(gate_proj(x)) * up_proj(x)")
@kcert.exact_casts
def transformers_llama_mlp(inputs, p, params):
    x, wg, wu = inputs["x"], inputs["Wg"], inputs["Wu"]
    config = LlamaConfig(hidden_size=x.shape[-1], intermediate_size=wg.shape[0], hidden_act="silu", mlp_bias=False)
    mlp = LlamaMLP(config).to(device=x.device, dtype=wg.dtype)
    # The family's output is the GLU's (the input of down_proj): the module's own forward runs,
    # with down_proj the identity.
    mlp.down_proj = torch.nn.Identity()
    return functional_call(mlp, {"gate_proj.weight": wg, "up_proj.weight": wu}, (x,))


class _AttentionModule:
    """What eager_attention_forward reads of its module."""

    def __init__(self, groups):
        self.num_key_value_groups = groups
        self.training = False


@kcert.variant("attention", "transformers_eager_attention", params={"causal": True, "scale": 0.0}, unavailable=MISSING, version=VERSION,
               description=f"transformers {RELEASE} eager_attention_forward (repeat_kv GQA, additive finfo.min mask)")
@kcert.exact_casts
def transformers_eager_attention(inputs, p, params):
    # q [B, heads, tokens, head_dim], k and v [B, kv_heads, kv_tokens, head_dim].
    q, k, v = inputs["q"], inputs["k"], inputs["v"]
    tokens, kv_tokens, head_dim = q.shape[-2], k.shape[-2], q.shape[-1]
    scaling = params["scale"] or head_dim ** -0.5
    mask = None
    if params["causal"]:
        # Bottom-right aligned, as the family's: query i sees key j iff j <= i + kv_tokens - tokens;
        # in the query's dtype, finfo.min where masked, as transformers' masking utilities make it.
        mask = torch.full((tokens, kv_tokens), torch.finfo(q.dtype).min, dtype=q.dtype, device=q.device)
        mask = mask.triu(kv_tokens - tokens + 1)[None, None]
    out, _ = eager_attention_forward(_AttentionModule(q.shape[1] // k.shape[1]), q, k, v, mask, scaling)
    return out.transpose(1, 2)  # transformers returns [B, tokens, heads, head_dim]
