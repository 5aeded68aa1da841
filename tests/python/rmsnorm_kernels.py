"""Python twins of three of kcert's C++ RMSNorm variants (harness/kernels/families/rmsnorm.cpp),
op for op, so a case run with them must give the C++ results bit for bit; and kernels that
misbehave, whose cases must each be an ERROR with its reason while the run goes on."""
import sys

import torch

import kcert


def inverse_rms(u, eps):
    return torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)


@kcert.variant("rmsnorm", "py_gemma", params={"eps": 1e-6})
def gemma(inputs, p, params):
    """Gemma zero-centred weight, gain (1 + w) in fp32 (the C++ `gemma`, in Python)"""
    u = p.up(inputs["x"])
    return p.round_w(u * inverse_rms(u, params["eps"]) * (1.0 + p.up(inputs["w"])))


@kcert.variant("rmsnorm", "py_gemma_offset_in_w", params={"eps": 1e-6})
def gemma_offset_in_w(inputs, p, params):
    """Gemma gain (1 + w) rounded to W per channel (N1; the C++ `gemma_offset_in_w`, in Python)"""
    u = p.up(inputs["x"])
    gain = p.round_w(p.up(inputs["w"]) + 1.0)
    return p.round_w(u * inverse_rms(u, params["eps"]) * p.up(gain))


@kcert.variant("rmsnorm", "py_fused_weight_fp32", params={"eps": 1e-6})
def fused_weight_fp32(inputs, p, params):
    u = p.up(inputs["x"])
    return p.round_w(u * inverse_rms(u, params["eps"]) * p.up(inputs["w"]))


@kcert.variant("rmsnorm", "py_gemma_offset_opaque", params={"eps": 1e-6}, exact=False)
def gemma_offset_opaque(inputs, p, params):
    """N1's defect written as an opaque kernel runs it: fixed fp32 math, bf16 out, no fp64 mode"""
    x = inputs["x"].float()
    gain = (inputs["w"].float() + 1.0).to(torch.bfloat16).float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + params["eps"]) * gain).to(torch.bfloat16)


@kcert.variant("rmsnorm", "py_raises", params={"eps": 1e-6})
def raises(inputs, p, params):
    raise ValueError("this kernel was asked for eps=%g" % params["eps"])


@kcert.variant("rmsnorm", "py_exits", params={"eps": 1e-6})
def exits(inputs, p, params):
    sys.exit(0)


@kcert.variant("rmsnorm", "py_not_a_tensor", params={"eps": 1e-6})
def not_a_tensor(inputs, p, params):
    return 1.0


# Hugging Face's LlamaRMSNorm.forward as transformers writes it (modeling_llama.py): its own
# cast points, `.to(torch.float32)` and back to the input dtype.
def hf_llama_rmsnorm(weight, hidden_states, eps):
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(input_dtype)


@kcert.variant("rmsnorm", "py_hf_llama_as_is", params={"eps": 1e-6})
def hf_llama_as_is(inputs, p, params):
    """LlamaRMSNorm's forward called as it is: under fp64 inputs it computes in fp32"""
    return hf_llama_rmsnorm(inputs["w"], inputs["x"], params["eps"])


@kcert.variant("rmsnorm", "py_hf_llama", params={"eps": 1e-6})
@kcert.exact_casts
def hf_llama(inputs, p, params):
    """LlamaRMSNorm's forward, its casts promoted to fp64 under the exact policy"""
    return hf_llama_rmsnorm(inputs["w"], inputs["x"], params["eps"])


# Backward: kcert's gradient of a variant is autograd through it (or the autograd.Function's
# own backward). The twins of the C++ `llama` and `llama_recip_sqrt`, the first as a
# torch.autograd.Function whose backward recomputes the forward under autograd.
def llama_forward(x, w, eps, p):
    u = p.up(x)
    h = p.round_w(u * inverse_rms(u, eps))
    return p.round_w(p.up(w) * p.up(h))


class LlamaRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps, p):
        ctx.save_for_backward(x, w)
        ctx.eps, ctx.p = eps, p
        return llama_forward(x, w, eps, p)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            x_, w_ = x.detach().requires_grad_(x.requires_grad), w.detach().requires_grad_(w.requires_grad)
            y = llama_forward(x_, w_, ctx.eps, ctx.p)
            wrt = [t for t in (x_, w_) if t.requires_grad]
            grads = iter(torch.autograd.grad(y, wrt, dy))
        return (next(grads) if x.requires_grad else None, next(grads) if w.requires_grad else None, None, None)


@kcert.variant("rmsnorm", "py_llama_function", params={"eps": 1e-6})
def llama_function(inputs, p, params):
    """HF LlamaRMSNorm cast points as a torch.autograd.Function (backward by recomputation)"""
    return LlamaRMSNormFunction.apply(inputs["x"], inputs["w"], params["eps"], p)


@kcert.variant("rmsnorm", "py_llama_recip_sqrt", params={"eps": 1e-6})
def llama_recip_sqrt(inputs, p, params):
    u = p.up(inputs["x"])
    h = p.round_w(u / torch.sqrt(u.pow(2).mean(-1, keepdim=True) + params["eps"]))
    return p.round_w(p.up(inputs["w"]) * p.up(h))


@kcert.variant("rmsnorm", "py_segfault", params={"eps": 1e-6})
def segfault(inputs, p, params):
    import ctypes
    return ctypes.string_at(0)  # reads address 0: SIGSEGV in the interpreter


# Non-finite outputs (issue 54): today's checks fail them, and kcert's emulation of them must.
@kcert.variant("rmsnorm", "py_nan_output", params={"eps": 1e-6})
def nan_output(inputs, p, params):
    """the C++ `llama` with one output element NaN in every replicate"""
    y = llama_forward(inputs["x"], inputs["w"], params["eps"], p).clone()
    y[:, 0, 0] = float("nan")
    return y


class NanGradientFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, eps, p):
        return LlamaRMSNormFunction.forward(ctx, x, w, eps, p)

    @staticmethod
    def backward(ctx, dy):
        dx, dw, _, _ = LlamaRMSNormFunction.backward(ctx, dy)
        if dx is not None:
            dx = dx.clone()
            dx[:, 0, 0] = float("nan")
        return dx, dw, None, None


@kcert.variant("rmsnorm", "py_nan_dx", params={"eps": 1e-6})
def nan_dx(inputs, p, params):
    """the C++ `llama` whose backward returns a NaN in dx"""
    return NanGradientFunction.apply(inputs["x"], inputs["w"], params["eps"], p)
