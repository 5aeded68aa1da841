"""A whole operator family defined in Python (kcert.family, issue 33): a Gemma-style RMSNorm
whose inputs, weights and channel buckets are drawn here, with three variants: the reference,
a correct rewrite (another fp32 product order) and the defective twin that forms 1 + w in W
(transformers#29402, N1's mechanism), and gradients dx and dw for its backward (autograd of
each variant's forward). tests/python/test_python_family.py runs them."""
import torch

import kcert


def _replicate(probe, fixed, seed):
    g = torch.Generator().manual_seed(seed)
    tokens, hidden = probe.params["shape.tokens"], probe.params["shape.hidden"]
    x = torch.randn(tokens, hidden, generator=g, dtype=torch.float64) * probe.scale + probe.shift
    return {"x": x.to(probe.dtype)}


def _fixed(probe, seed):
    g = torch.Generator().manual_seed(seed)
    hidden = probe.params["shape.hidden"]
    spread = probe.params["weights.spread"]
    w = (torch.rand(hidden, generator=g, dtype=torch.float64) * 2 - 1) * spread
    return {"w": w.to(probe.dtype)}


def _channel(probe, shape):
    return torch.arange(shape[-1]).expand(*shape)


def _row(probe, shape):
    return torch.arange(shape[0]).unsqueeze(-1).expand(*shape)


def _element(probe, shape):
    return torch.arange(shape[-1]).expand(*shape)


kcert.family("py_gemma_norm", replicate=_replicate, fixed=_fixed, buckets={"channel": _channel, "row": _row},
             probe={"shape.tokens": 64, "shape.hidden": 128, "weights.spread": 0.5},
             description="Gemma RMSNorm defined in Python: x [tokens, hidden], weight w [hidden], gain 1 + w",
             gradients={"dx": {"input": "x", "buckets": {"channel": _channel, "row": _row}},
                        "dw": {"input": "w", "buckets": {"element": _element}, "reduction": "shape.tokens",
                               "description": "gradient of the weight, a sum over the replicate's tokens"}})


def _normalized(u, eps):
    return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps)


@kcert.variant("py_gemma_norm", "reference", params={"eps": 1e-6})
def reference(inputs, p, params):
    """(1 + w) in fp32, one rounding to W"""
    u = p.up(inputs["x"])
    return p.round_w(_normalized(u, params["eps"]) * (1.0 + p.up(inputs["w"])))


@kcert.variant("py_gemma_norm", "reordered", params={"eps": 1e-6})
def reordered(inputs, p, params):
    """the same function, the gain applied before the normalization's scale"""
    u = p.up(inputs["x"])
    r = torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + params["eps"])
    return p.round_w(u * ((1.0 + p.up(inputs["w"])) * r))


@kcert.variant("py_gemma_norm", "gain_in_w", params={"eps": 1e-6})
def gain_in_w(inputs, p, params):
    """1 + w rounded to W before it scales (the defect)"""
    u = p.up(inputs["x"])
    return p.round_w(_normalized(u, params["eps"]) * p.up(p.round_w(1.0 + p.up(inputs["w"]))))
