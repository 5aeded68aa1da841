"""A whole family defined in Python (kcert.family, issue 33): its cases load, validate and run
through `python -m kcert` in process and in spawned Python workers, and through the kcert
binary (which describes the file and runs the case in a worker); the defective twin FAILs
the bias gate with its channels named, the correct rewrite passes."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
KCERT = os.environ["KCERT_BINARY"]
KERNELS = HERE / "family_kernels.py"

CASE = """schema: 1
id: {id}
kind: {kind}
family: py_gemma_norm
mechanism: a Gemma RMSNorm whose family is defined in Python
references: [https://github.com/huggingface/transformers/pull/29402]
reference: {{variant: reference}}
production: {{variant: {production}}}
probe:
  dtype: bf16
  seed: 29402
  shift: 0.5
  shape: {{tokens: 64, hidden: 128}}
  weights: {{spread: 0.5}}
buckets: channel
gates: {{replicates: 64}}
expected: {{algebra: PASS, bias: {bias}}}
"""


def write_case(folder, production, kind, bias):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{production}.yaml"
    path.write_text(CASE.format(id=f"py_family_{production}", kind=kind, production=production, bias=bias))
    return path


def run(command, case, out, *extra):
    return subprocess.run([*command, *map(str, extra), "run", str(case), "--quiet", "--brief", "--json", str(out)],
                          capture_output=True, text=True)


PYTHON = [sys.executable, "-m", "kcert", "--python", str(KERNELS)]


def test_the_family_is_listed_with_its_probe_parameters_and_axes():
    r = subprocess.run([*PYTHON, "list", "py_gemma_norm"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    for word in ("reference", "reordered", "gain_in_w", "shape.tokens", "weights.spread", "channel"):
        assert word in r.stdout, r.stdout


@pytest.mark.parametrize("isolation", ["none", "all"])
def test_the_defect_fails_with_channels_named_and_the_rewrite_passes(tmp_path, isolation):
    defect = write_case(tmp_path, "gain_in_w", "negative", "FAIL")
    rewrite = write_case(tmp_path, "reordered", "positive", "PASS")
    p = run(PYTHON, defect, tmp_path / "defect.json", "--isolation", isolation)
    assert p.returncode == 1, p.stdout + p.stderr
    r = json.loads((tmp_path / "defect.json").read_text())["results"][0]
    assert r["gates"]["algebra"]["verdict"] == "PASS", r["gates"]["algebra"]
    assert r["gates"]["bias"]["verdict"] == "FAIL"
    assert r["gates"]["bias"]["axis"] == "channel"
    assert r["gates"]["bias"]["signed"]["flagged"], r["gates"]["bias"]
    p = run(PYTHON, rewrite, tmp_path / "rewrite.json", "--isolation", isolation)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads((tmp_path / "rewrite.json").read_text())["results"][0]
    assert r["unexpected"] == [], r["unexpected"]
    assert r["gates"]["bias"]["verdict"] == "PASS"


def test_the_same_seed_draws_the_same_inputs_in_process_and_in_a_worker(tmp_path):
    defect = write_case(tmp_path, "gain_in_w", "negative", "FAIL")
    docs = []
    for isolation in ("none", "all"):
        out = tmp_path / f"{isolation}.json"
        run(PYTHON, defect, out, "--isolation", isolation)
        r = json.loads(out.read_text())["results"][0]
        docs.append(json.dumps({k: v for k, v in r.items() if k != "runtime"}, sort_keys=True))
    assert docs[0] == docs[1]


def test_the_kcert_binary_describes_the_family_and_runs_its_case_in_a_worker(tmp_path):
    defect = write_case(tmp_path, "gain_in_w", "negative", "FAIL")
    p = run([KCERT, "--python", str(KERNELS)], defect, tmp_path / "binary.json")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "1 family(ies)" in p.stderr, p.stderr
    r = json.loads((tmp_path / "binary.json").read_text())["results"][0]
    assert r["gates"]["bias"]["verdict"] == "FAIL"


def test_a_probe_parameter_the_family_does_not_declare_is_a_load_error(tmp_path):
    case = write_case(tmp_path, "reordered", "positive", "PASS")
    case.write_text(case.read_text().replace("shape: {tokens: 64, hidden: 128}", "shape: {tokens: 64, hiden: 128}"))
    p = run(PYTHON, case, tmp_path / "x.json")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "hiden" in p.stderr and "hidden" in p.stderr, p.stderr


def test_a_family_whose_buckets_do_not_fit_its_output_is_the_case_error(tmp_path):
    bad = tmp_path / "bad_kernels.py"
    bad.write_text(KERNELS.read_text().replace("return torch.arange(shape[-1]).expand(*shape)",
                                               "return torch.arange(shape[-1])"))
    os.chmod(bad, 0o644)
    case = write_case(tmp_path / "cases", "reordered", "positive", "PASS")
    p = subprocess.run([sys.executable, "-m", "kcert", "--python", str(bad), "--isolation", "none", "run", str(case),
                        "--quiet", "--brief"], capture_output=True, text=True)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "buckets[channel] returned shape" in p.stdout + p.stderr, p.stdout + p.stderr


BACKWARD = """schema: 1
id: py_family_{production}_backward
kind: {kind}
family: py_gemma_norm
direction: backward
mechanism: the Gemma gain formed in W scales dx per channel; the +1 cancels in dw (BN5's mechanism)
references: [https://github.com/linkedin/Liger-Kernel/pull/1462]
reference: {{variant: reference}}
production: {{variant: {production}}}
probe:
  dtype: bf16
  seed: 1462
  shift: 0.5
  shape: {{tokens: 64, hidden: 128}}
backward:
  dy: {{kind: shifted, shift: 0.5, scale: 1.0}}
  gradients: [dx, dw]
gates: {{replicates: 64}}
expected: {{algebra: PASS, bias: {bias}}}
"""


def test_a_python_family_certifies_its_backward_gradient_by_gradient(tmp_path):
    # BN5's mechanism on the Python family: the gain formed in W scales dx per channel (bias
    # FAIL on dx), while dw = sum dy * x_hat does not see it.
    case = tmp_path / "bn.yaml"
    case.write_text(BACKWARD.format(production="gain_in_w", kind="negative", bias="FAIL"))
    out = tmp_path / "bn.json"
    p = run(PYTHON, case, out, "--isolation", "none")
    assert p.returncode == 1, p.stdout + p.stderr
    r = json.loads(out.read_text())["results"][0]
    gradients = {g["name"]: g for g in r["backward"]["gradients"]}
    assert set(gradients) == {"dx", "dw"}, list(gradients)
    assert gradients["dx"]["bias"] == "FAIL", gradients["dx"]
    assert gradients["dx"]["bucket_axis"] == "channel"
    assert gradients["dw"]["bias"] == "PASS", gradients["dw"]
    assert gradients["dw"]["reduction_size"] == 64  # shape.tokens, the N a weight's gradient sums over
    # The reordered rewrite's backward passes, and the binary route runs the same case.
    case.write_text(BACKWARD.format(production="reordered", kind="positive", bias="PASS"))
    p = run([KCERT, "--python", str(KERNELS)], case, out)
    assert p.returncode == 0, p.stdout + p.stderr
    r = json.loads(out.read_text())["results"][0]
    assert all(g["bias"] == "PASS" for g in r["backward"]["gradients"]), r["backward"]


def test_a_family_declaration_is_checked_before_it_is_registered():
    import kcert
    ids = {"a": lambda probe, shape: None}
    with pytest.raises(TypeError, match="replicate must be callable"):
        kcert.family("bad_family", replicate=None, buckets=ids)
    with pytest.raises(TypeError, match="buckets must map at least one axis"):
        kcert.family("bad_family", replicate=lambda probe, fixed, seed: {}, buckets={})
    # A flag is not a count: the reduction must name an integer parameter (True is an int to Python).
    with pytest.raises(ValueError, match="must name an integer probe parameter"):
        kcert.family("bad_family", replicate=lambda probe, fixed, seed: {}, buckets=ids, probe={"flag": True},
                     gradients={"dw": {"input": "w", "buckets": ids, "reduction": "flag"}})
    with pytest.raises(TypeError, match="unknown key"):
        kcert.family("bad_family", replicate=lambda probe, fixed, seed: {}, buckets=ids,
                     gradients={"dw": {"input": "w", "buckets": ids, "reduce": "tokens"}})
    assert not any(f[0] == "bad_family" for f in kcert._families)
