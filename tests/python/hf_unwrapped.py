"""transformers' LlamaRMSNorm called as it is, without @kcert.exact_casts: the oracle trap."""
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import kcert


@kcert.variant("rmsnorm", "hf_llama_rmsnorm_as_is", params={"eps": 1e-6})
def hf_llama_rmsnorm_as_is(inputs, p, params):
    x, w = inputs["x"], inputs["w"]
    module = LlamaRMSNorm(x.shape[-1], eps=params["eps"]).to(device=x.device, dtype=w.dtype)
    with torch.no_grad():
        module.weight.copy_(w)
    return module(x)
