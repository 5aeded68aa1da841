"""The real transformers modules as references (issue 33): examples/python/hf_rmsnorm.py's
LlamaRMSNorm and GemmaRMSNorm, imported from the installed transformers, against kcert's C++
replays of the same cast points. Skipped where transformers is not installed (Debian's
python3-torch pass); the PyPI pass installs a pinned release (scripts/install-deps.sh)."""
import json
import subprocess
import sys

import pytest

from test_python_variants import SOURCE, comparable, cpp_and_python, with_variants

transformers = pytest.importorskip("transformers")

HF = SOURCE / "examples/python/hf_rmsnorm.py"
HF_REFERENCES = SOURCE / "testcases/python/hf_references.py"
CONTROLS = SOURCE / "testcases"


def kcert_py(*args):
    return subprocess.run([sys.executable, "-m", "kcert", "--python", str(HF), *map(str, args)],
                          capture_output=True, text=True)


def same_results(tmp_path, control, cpp_pair, py_pair, directions=None):
    """The control with the C++ pair and with the Python pair (examples/python/hf_rmsnorm.py);
    `directions`: how many of the results (forward first) must agree, default all."""
    cpp, py, a, b = cpp_and_python(tmp_path, CONTROLS / control, cpp_pair, py_pair, python_file=HF)
    if directions is None:
        assert cpp.returncode == py.returncode, cpp.stdout + cpp.stderr + py.stdout + py.stderr
    for r in b["results"]:
        assert r["verdict"] != "ERROR", json.dumps(r)[:3000]
    assert comparable(a)[:directions] == comparable(b)[:directions]
    return a, b


def test_llama_rmsnorm_is_the_cpp_llama_reference_forward_not_backward(tmp_path):
    # rw_rmsnorm_rsqrt_vs_recip_sqrt in both directions. Forward: transformers' LlamaRMSNorm
    # gives kcert's `llama` bit for bit. Backward: it does not, and that is a finding about
    # the replay: eager bf16 autograd of `weight * h.to(bf16)` rounds each product dy*h to bf16
    # before the reduction over tokens, where autograd through `llama`'s policy function
    # (round_w(up(w) * up(h))) forms the products in fp32. At smoke the bias gate reads the
    # difference as INCONCLUSIVE where the C++ replay PASSes; the real module is the truer
    # reference of the eager backward (docs/python.md).
    a, b = same_results(tmp_path, "positive/rmsnorm/rw_rmsnorm_rsqrt_vs_recip_sqrt.yaml",
                        ("llama", "llama_recip_sqrt"), ("hf_llama_rmsnorm", "llama_recip_sqrt"), directions=1)
    assert len(b["results"]) == 2 and b["results"][1]["backward"] is not None
    assert comparable(a)[1] != comparable(b)[1]


def test_a_bf16_llamas_rotary_embedding_is_r3s_arrangement(tmp_path):
    # testcases/python/hf_references.py: transformers' LlamaRotaryEmbedding and
    # apply_rotary_pos_emb given the values in bf16, as a bf16 Llama runs them (its tables cast to
    # the input's dtype, the rotation in it), give kcert's C++ `neox_w_tables`, R3's production,
    # bit for bit; given fp32 values they give `neox_fp32`. So the twin control
    # r3_rope_cos_sin_tables_bf16_transformers is R3 with transformers' code on both sides.
    cpp, py, a, b = cpp_and_python(tmp_path, CONTROLS / "negative/rope/r3_rope_cos_sin_tables_bf16.yaml",
                                   ("neox_fp32", "neox_w_tables"),
                                   ("transformers_apply_rotary_pos_emb", "transformers_apply_rotary_pos_emb_model_dtype"),
                                   python_file=HF_REFERENCES)
    assert cpp.returncode == py.returncode, cpp.stdout + cpp.stderr + py.stdout + py.stderr
    assert b["results"][0]["verdict"] != "ERROR", json.dumps(b["results"][0])[:3000]
    assert comparable(a) == comparable(b)


def test_llama_rmsnorm_as_n3s_reference(tmp_path):
    same_results(tmp_path, "negative/rmsnorm/n3_rmsnorm_cast_before_weight.yaml",
                 ("llama", "fused_weight_fp32"), ("hf_llama_rmsnorm", "fused_weight_fp32"))


def test_gemma_rmsnorm_as_n1s_reference(tmp_path):
    same_results(tmp_path, "negative/rmsnorm/n1_gemma_rmsnorm_offset_bf16.yaml",
                 ("gemma", "gemma_offset_in_w"), ("hf_gemma_rmsnorm", "gemma_offset_in_w"))


def test_the_example_certifies_a_fused_rewrite_and_fails_its_defective_twin(tmp_path):
    r = kcert_py("run", SOURCE / "examples/python", "--quiet", "--brief", "--json", tmp_path / "out.json")
    assert r.returncode == 1, r.stdout + r.stderr  # the defective twin FAILs
    results = {x["id"]: x for x in json.loads((tmp_path / "out.json").read_text())["results"]}
    good = results["hf_gemma_vs_fused_gemma_rmsnorm"]
    bad = results["hf_gemma_vs_fused_gemma_rmsnorm_bf16_gain"]
    assert good["verdict"] == "PASS" and good["unexpected"] == []
    assert bad["verdict"] == "FAIL" and bad["unexpected"] == []
    top = bad["gates"]["bias"]["signed"]["top"][0]
    assert top["verdict"] == "FAIL" and bad["gates"]["bias"]["axis"] == "channel"


def test_llama_rmsnorm_as_it_is_is_refused_as_an_oracle(tmp_path):
    case = tmp_path / "n3.yaml"
    case.write_text(with_variants((CONTROLS / "negative/rmsnorm/n3_rmsnorm_cast_before_weight.yaml").read_text(),
                                  "hf_llama_rmsnorm_as_is", "fused_weight_fp32"))
    unwrapped = SOURCE / "tests/python/hf_unwrapped.py"
    r = subprocess.run([sys.executable, "-m", "kcert", "--python", str(unwrapped), "run", str(case), "--profile",
                        "smoke", "--quiet", "--brief", "--json", str(tmp_path / "out.json")], capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    text = json.dumps(json.loads((tmp_path / "out.json").read_text())["results"][0])
    assert "is not exact under the exact policy" in text
    assert "modeling_llama.py" in text and "hidden_states.to(torch.float32)" in text


def test_the_environment_records_the_transformers_release():
    r = kcert_py("environment", "--json")
    assert r.returncode == 0, r.stderr
    front_end = json.loads(r.stdout)["identity"]["front_end"]
    assert front_end["modules"]["transformers"] == transformers.__version__
    assert "hf_rmsnorm.py" in front_end["files"]
