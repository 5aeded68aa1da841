"""Hugging Face transformers' RMSNorm modules as kcert references, and two Python rewrites of
Gemma's: a correct fused one and its defective twin (N1: the gain 1 + w formed in bf16,
transformers#29402). docs/python.md walks through it.

    python3 -m kcert --python examples/python/hf_rmsnorm.py run examples/python/

The references are transformers' own modules, not copies: `@kcert.exact_casts` promotes their
`.to(torch.float32)` / `.float()` casts to fp64 under kcert's exact policy (the oracle and the
algebra gate) and leaves them as they are under bf16.
"""
import torch
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import kcert

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


@kcert.variant("rmsnorm", "hf_llama_rmsnorm", params={"eps": 1e-6})
@kcert.exact_casts
def hf_llama_rmsnorm(inputs, p, params):
    """transformers LlamaRMSNorm: normalize in fp32, cast to the input dtype, times the weight"""
    return run_module(LlamaRMSNorm, inputs, params["eps"])


@kcert.variant("rmsnorm", "hf_gemma_rmsnorm", params={"eps": 1e-6})
@kcert.exact_casts
def hf_gemma_rmsnorm(inputs, p, params):
    """transformers GemmaRMSNorm: normalize and scale by (1 + w) in fp32, one cast at the end"""
    return run_module(GemmaRMSNorm, inputs, params["eps"])


@kcert.variant("rmsnorm", "fused_gemma_rmsnorm", params={"eps": 1e-6})
def fused_gemma_rmsnorm(inputs, p, params):
    """a fused rewrite of GemmaRMSNorm: one pass in fp32, the gain 1 + w formed in fp32"""
    u = p.up(inputs["x"])
    r = torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + params["eps"])
    return p.round_w(u * r * (1.0 + p.up(inputs["w"])))


@kcert.variant("rmsnorm", "fused_gemma_rmsnorm_bf16_gain", params={"eps": 1e-6})
def fused_gemma_rmsnorm_bf16_gain(inputs, p, params):
    """its defective twin: the gain 1 + w formed in the weight's dtype (bf16) before the fp32 multiply"""
    u = p.up(inputs["x"])
    r = torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + params["eps"])
    gain = p.round_w(p.up(inputs["w"]) + 1.0)  # `w + 1.0` on a bf16 tensor stays bf16
    return p.round_w(u * r * p.up(gain))
