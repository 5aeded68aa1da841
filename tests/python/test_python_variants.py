"""Python variants through kcert's command line (issue 33, first slice), run by CTest with
the build's Python: KCERT_BINARY is the C++ kcert, PYTHONPATH holds the built package."""
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
SOURCE = HERE.parent.parent
KCERT = os.environ["KCERT_BINARY"]
KERNELS = HERE / "rmsnorm_kernels.py"
N1 = SOURCE / "testcases/negative/rmsnorm/n1_gemma_rmsnorm_offset_bf16.yaml"
N3 = SOURCE / "testcases/negative/rmsnorm/n3_rmsnorm_cast_before_weight.yaml"
RW16 = SOURCE / "testcases/positive/rmsnorm/rw_rmsnorm_rsqrt_vs_recip_sqrt.yaml"


def python_kcert(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "kcert", "--python", str(KERNELS), *map(str, args)],
                          capture_output=True, text=True, cwd=cwd)


def with_variants(text, reference, production):
    text = re.sub(r"^reference: .*$", f"reference: {{variant: {reference}}}", text, flags=re.M)
    return re.sub(r"^production: .*$", f"production: {{variant: {production}}}", text, flags=re.M)


def comparable(document):
    """The results without what names the kernels or times them."""
    out = []
    for r in document["results"]:
        r = json.loads(json.dumps(r))
        for key in ("runtime", "reference", "production", "source", "case_text"):
            r.pop(key, None)
        out.append(r)
    return out


def cpp_and_python(tmp_path, control, cpp_pair, py_pair, *python_args, python_file=KERNELS):
    """`control` at its smoke profile twice: with the C++ pair through the kcert binary, and with
    the Python pair through `python -m kcert --python python_file PYTHON_ARGS... run`.
    Returns the two processes and the two results documents."""
    text = control.read_text()
    runs = []
    for name, pair, command in (("cpp", cpp_pair, [KCERT]),
                                ("py", py_pair, [sys.executable, "-m", "kcert", "--python", str(python_file),
                                                 *map(str, python_args)])):
        case = tmp_path / name / control.name
        case.parent.mkdir()
        case.write_text(with_variants(text, *pair))
        out = tmp_path / f"{name}.json"
        p = subprocess.run([*command, "run", str(case), "--profile", "smoke", "--quiet", "--brief", "--json", str(out)],
                           capture_output=True, text=True)
        runs.append((p, json.loads(out.read_text()) if out.exists() else None))
    (cpp, a), (py, b) = runs
    assert a is not None, cpp.stdout + cpp.stderr
    assert b is not None, py.stdout + py.stderr
    return cpp, py, a, b


def test_python_variants_join_the_registry():
    r = python_kcert("list", "rmsnorm")
    assert r.returncode == 0, r.stderr
    for name in ("py_gemma", "py_gemma_offset_in_w", "py_fused_weight_fp32"):
        assert name in r.stdout
    assert "Gemma gain (1 + w) rounded to W per channel" in r.stdout  # the docstring's first line


@pytest.mark.parametrize("isolation", ["none", "all"])
def test_a_python_twin_gives_the_cpp_results_bit_for_bit(tmp_path, isolation):
    # N1 at the smoke profile: the C++ pair with the kcert binary, the Python twins with
    # python -m kcert, in process (none) and in spawned Python workers (all).
    cpp, py, a, b = cpp_and_python(tmp_path, N1, ("gemma", "gemma_offset_in_w"), ("py_gemma", "py_gemma_offset_in_w"),
                                   "--isolation", isolation)
    assert cpp.returncode == 1, cpp.stdout + cpp.stderr  # N1 FAILs the bias gate
    assert py.returncode == 1, py.stdout + py.stderr
    assert b["results"][0]["verdict"] == "FAIL"
    assert comparable(a) == comparable(b)
    version = json.dumps(b["results"][0]["production"])
    assert "python:rmsnorm_kernels.py@sha256:" in version  # the kernel file's hash is recorded


def test_an_opaque_production_is_certified_by_bias_and_variance_with_its_algebra_gate_not_applicable(tmp_path):
    # N1's defect as an opaque kernel (exact=False: fixed fp32 math, no fp64 mode) against the
    # exact Python reference: never run under the exact policy, its algebra gate reads "not
    # applicable", and bias and variance give the C++ N1's figures bit for bit.
    cpp, py, a, b = cpp_and_python(tmp_path, N1, ("gemma", "gemma_offset_in_w"), ("py_gemma", "py_gemma_offset_opaque"))
    assert py.returncode == 1, py.stdout + py.stderr  # the bias gate still FAILs it
    ra, rb = a["results"][0], b["results"][0]
    assert ra["gates"]["algebra"]["applicable"] is True
    assert rb["gates"]["algebra"]["applicable"] is False
    assert rb["gates"]["algebra"]["reason"].startswith("not applicable: opaque production 'py_gemma_offset_opaque'")
    assert rb["gates"]["algebra"]["replicates"] == 0
    assert rb["gates"]["bias"] == ra["gates"]["bias"]
    assert rb["gates"]["variance"] == ra["gates"]["variance"]
    assert re.search(r"n1_gemma_rmsnorm_offset_bf16\s+n/a\s+FAIL", py.stdout), py.stdout


def test_an_opaque_production_s_backward_is_certified_with_its_algebra_gates_not_applicable(tmp_path):
    # The same opaque kernel in a case of both directions: its gradients come from autograd at
    # W only (never the exact policy), each gradient's algebra gate reads n/a in the JSON and
    # the console, and bias and variance judge them against the reference's fp64 gradients.
    # It was an ERROR ("its backward cannot be certified yet").
    cpp, py, a, b = cpp_and_python(tmp_path, RW16, ("gemma", "gemma_offset_in_w"), ("py_gemma", "py_gemma_offset_opaque"))
    assert [r["id"] for r in b["results"]] == ["rw_rmsnorm_rsqrt_vs_recip_sqrt", "rw_rmsnorm_rsqrt_vs_recip_sqrt@backward"]
    backward = b["results"][1]
    assert backward["verdict"] != "ERROR", backward.get("error")
    assert backward["gates"]["algebra"]["applicable"] is False
    assert backward["gates"]["algebra"]["reason"].startswith("not applicable: opaque production"), backward["gates"]["algebra"]
    gradients = backward["backward"]["gradients"]
    assert [g["name"] for g in gradients] == ["dx", "dw"]
    assert all(g["algebra_applicable"] is False for g in gradients), gradients
    assert all("algebra_applicable" not in g for g in a["results"][1]["backward"]["gradients"])  # exact: not written
    assert re.search(r"rw_rmsnorm_rsqrt_vs_recip_sqrt@backward\s+n/a\s", py.stdout), py.stdout
    # The C++ pair's backward (the same arithmetic, run exactly for its algebra gate) is
    # detected by the bias gate; so is the opaque one, on the reference's oracle.
    assert a["results"][1]["gates"]["bias"]["verdict"] == backward["gates"]["bias"]["verdict"]


FAMILY_PLUGIN = os.environ.get("KCERT_FAMILY_PLUGIN")


@pytest.mark.skipif(not FAMILY_PLUGIN, reason="KCERT_FAMILY_PLUGIN (tests/plugin/family_plugin.cpp) is not set")
@pytest.mark.parametrize("isolation", ["none", "all"])
@pytest.mark.parametrize("named_by", ["--plugin", "case file"])
def test_a_python_variant_joins_a_plugin_s_family(tmp_path, isolation, named_by):
    # A plugin registers plugin_rmsnorm (the built-in rmsnorm under another name); a Python
    # variant joins it. The variants joined before the plugins were loaded, so the family was
    # "not registered", in process and in the spawned worker alike (issue 33); and a plugin
    # named by the case file's `plugins:` loads only when its case file is read, after the
    # command line's: the variant waits for it.
    kernels = tmp_path / "plugin_family_kernels.py"
    kernels.write_text(
        "import torch\n"
        "import kcert\n\n\n"
        "@kcert.variant('plugin_rmsnorm', 'py_gemma_offset_in_w', params={'eps': 1e-6})\n"
        "def gemma_offset_in_w(inputs, p, params):\n"
        "    u = p.up(inputs['x'])\n"
        "    gain = p.round_w(p.up(inputs['w']) + 1.0)\n"
        "    return p.round_w(u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + params['eps']) * p.up(gain))\n")
    case = tmp_path / "n1_plugin_family.yaml"
    text = with_variants(N1.read_text(), "gemma", "py_gemma_offset_in_w").replace("family: rmsnorm", "family: plugin_rmsnorm")
    plugin = ["--plugin", FAMILY_PLUGIN]
    if named_by == "case file":
        text = f"plugins: [{FAMILY_PLUGIN}]\n" + text
        plugin = ["--allow-case-plugins"]
    case.write_text(text)
    out = tmp_path / "r.json"
    p = subprocess.run([sys.executable, "-m", "kcert", "--python", str(kernels), *plugin, "run", str(case),
                        "--profile", "smoke", "--quiet", "--brief", "--isolation", isolation, "--json", str(out)],
                       capture_output=True, text=True)
    assert p.returncode == 1, p.stdout + p.stderr  # N1's defect FAILs the bias gate
    r = json.loads(out.read_text())["results"][0]
    assert r["family"] == "plugin_rmsnorm"
    assert r["gates"]["bias"]["verdict"] == "FAIL", r["gates"]["bias"]["reason"]
    assert "python:plugin_family_kernels.py@sha256:" in json.dumps(r["production"])


def test_an_opaque_kernel_cannot_be_the_reference(tmp_path):
    case = tmp_path / "opaque_reference.yaml"
    case.write_text(with_variants(N1.read_text(), "py_gemma_offset_opaque", "py_gemma"))
    r = python_kcert("run", case, "--profile", "smoke", "--quiet")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "reference.variant: variant 'py_gemma_offset_opaque' is opaque (exact=False: no fp64 mode)" in r.stderr, r.stderr


def test_a_misbehaving_python_kernel_is_its_cases_error(tmp_path):
    text = N1.read_text()
    for name in ("py_raises", "py_exits", "py_not_a_tensor", "py_segfault"):
        case = with_variants(text, "py_gemma", name).replace("id: n1_gemma_rmsnorm_offset_bf16", f"id: case_{name}")
        (tmp_path / f"{name}.yaml").write_text(case)
    (tmp_path / "ok.yaml").write_text(with_variants(text, "gemma", "gemma_offset_in_w").replace(
        "id: n1_gemma_rmsnorm_offset_bf16", "id: case_ok"))
    r = python_kcert("run", tmp_path, "--profile", "smoke", "--quiet", "--brief", "--json", tmp_path / "out.json")
    out = r.stdout + r.stderr
    assert r.returncode == 2, out
    document = json.loads((tmp_path / "out.json").read_text())
    by_id = {res["id"]: res for res in document["results"]}
    assert set(by_id) == {"case_py_raises", "case_py_exits", "case_py_not_a_tensor", "case_py_segfault", "case_ok"}
    errors = {i: json.dumps(res) for i, res in by_id.items()}
    assert "this kernel was asked for eps=1e-06" in errors["case_py_raises"]
    assert "SystemExit" in errors["case_py_exits"]
    assert "returned a float, not a torch.Tensor" in errors["case_py_not_a_tensor"]
    # A crash of the interpreter is the spawned worker's, and the reason says whose kernel.
    assert "Python kernel killed by SIGSEGV" in errors["case_py_segfault"]
    assert by_id["case_ok"]["verdict"] == "FAIL"  # N1's pair, run as usual
    for name in ("py_raises", "py_exits", "py_not_a_tensor", "py_segfault"):
        assert by_id[f"case_{name}"]["verdict"] == "ERROR"


def test_a_variant_of_an_unknown_family_is_refused(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import kcert\n@kcert.variant('rmsnrom', 'x')\ndef f(i, p, q):\n    return i['x']\n")
    r = subprocess.run([sys.executable, "-m", "kcert", "--python", str(bad), "list"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "names family 'rmsnrom', which is not registered" in r.stderr
    assert "rmsnorm" in r.stderr  # the families it could have meant
    # A command that reads case files waits for their plugins' families, then refuses it the same way.
    r = subprocess.run([sys.executable, "-m", "kcert", "--python", str(bad), "run", str(N1), "--profile", "smoke", "--quiet"],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "names family 'rmsnrom', which is not registered" in r.stderr


def test_a_python_file_others_can_write_is_refused(tmp_path):
    f = tmp_path / "k.py"
    f.write_text("import kcert\n")
    f.chmod(0o664)
    r = subprocess.run([sys.executable, "-m", "kcert", "--python", str(f), "list"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "writable by its group or others" in r.stderr
    r = subprocess.run([sys.executable, "-m", "kcert", "--python", str(tmp_path / "none.py"), "list"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "no such file" in r.stderr



def test_hf_eager_code_wrapped_with_exact_casts_is_the_cpp_llama_reference(tmp_path):
    # N3's reference is kcert's `llama` (HF LlamaRMSNorm's cast points, in C++). Transformers'
    # own forward (verbatim in rmsnorm_kernels.py), wrapped with @kcert.exact_casts, must give
    # the same results bit for bit: under bf16 its casts are the real ones, under the exact
    # policy they are promoted to fp64. Default isolation: the Python case runs in a spawned worker.
    cpp, py, a, b = cpp_and_python(tmp_path, N3, ("llama", "fused_weight_fp32"), ("py_hf_llama", "fused_weight_fp32"))
    assert cpp.returncode == py.returncode, cpp.stdout + cpp.stderr + py.stdout + py.stderr
    assert b["results"][0]["verdict"] != "ERROR", json.dumps(b["results"][0])[:2000]
    assert comparable(a) == comparable(b)


def test_hf_eager_code_as_it_is_is_refused_as_an_oracle(tmp_path):
    # The oracle trap: LlamaRMSNorm's `.to(torch.float32)` computes in fp32 on fp64 inputs and
    # casts back, so the fp64 output hides it. The case is an ERROR that names the line.
    case = tmp_path / "n3.yaml"
    case.write_text(with_variants(N3.read_text(), "py_hf_llama_as_is", "fused_weight_fp32"))
    r = python_kcert("run", case, "--profile", "smoke", "--quiet", "--brief", "--json", tmp_path / "out.json")
    assert r.returncode == 2, r.stdout + r.stderr
    result = json.loads((tmp_path / "out.json").read_text())["results"][0]
    assert result["verdict"] == "ERROR"
    text = json.dumps(result)
    assert "variant rmsnorm/py_hf_llama_as_is is not exact under the exact policy" in text
    assert "rmsnorm_kernels.py:" in text and "hidden_states.to(torch.float32)" in text
    assert "@kcert.exact_casts" in text



def test_backward_through_a_python_autograd_function_gives_the_cpp_gradients(tmp_path):
    # rw_rmsnorm_rsqrt_vs_recip_sqrt certifies both directions: the forward and, through
    # autograd, the gradients dx and dw. The reference is a torch.autograd.Function whose
    # backward kcert's C++ autograd calls (taking the GIL); every figure must match C++.
    cpp, py, a, b = cpp_and_python(tmp_path, RW16, ("llama", "llama_recip_sqrt"),
                                   ("py_llama_function", "py_llama_recip_sqrt"), "--isolation", "none")
    assert cpp.returncode == 0, cpp.stdout + cpp.stderr
    assert py.returncode == 0, py.stdout + py.stderr
    assert [r["id"] for r in b["results"]] == ["rw_rmsnorm_rsqrt_vs_recip_sqrt", "rw_rmsnorm_rsqrt_vs_recip_sqrt@backward"]
    assert b["results"][1]["backward"] is not None
    assert comparable(a) == comparable(b)


def test_the_environment_records_python_torch_and_the_kernel_files(tmp_path):
    import hashlib
    import platform
    import torch
    r = python_kcert("environment", "--json")
    assert r.returncode == 0, r.stderr
    front_end = json.loads(r.stdout)["identity"]["front_end"]
    assert front_end["python"] == platform.python_version()
    assert front_end["torch"] == torch.__version__.split("+")[0]
    assert front_end["files"] == {"rmsnorm_kernels.py": hashlib.sha256(KERNELS.read_bytes()).hexdigest()}
    # The kcert binary's environment has no front end, so its fingerprint is what it was.
    plain = json.loads(subprocess.run([KCERT, "environment", "--json"], capture_output=True, text=True).stdout)
    assert "front_end" not in plain["identity"]
    assert json.loads(r.stdout)["fingerprint"] != plain["fingerprint"]
    words = python_kcert("environment").stdout
    assert f"Python {platform.python_version()} (torch " in words


def test_fork_isolation_of_a_python_process_is_refused(tmp_path):
    # A fork of a process that has imported torch does not carry its threads or the GIL.
    r = python_kcert("--isolation-process", "fork", "run", N1, "--profile", "smoke", "--quiet")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--isolation-process fork: this process is Python" in r.stderr
    assert python_kcert("--isolation-process", "fork", "--isolation", "none", "list").returncode == 0


def test_certify_records_the_kernel_files_digest(tmp_path):
    # An edited kernel file is another kernel version, as for @kcert.variant.
    f = tmp_path / "k.py"
    f.write_text("import kcert\n\ndef mine(inputs, p, params):\n    return p.round_w(p.up(inputs['x']))\n")
    script = (f"import sys, importlib.util, kcert\nsys.path.insert(0, {str(tmp_path)!r})\nimport k\n"
              "c = kcert.certify(family='rmsnorm', reference='gemma', production=k.mine, replicates=8,\n"
              "                  probe={'shape': {'tokens': 8, 'hidden': 64}})\n"
              "print(c.result['production']['version'])\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert re.search(r"^python:k\.py@sha256:[0-9a-f]{12}:mine$", r.stdout.strip().splitlines()[-1]), r.stdout


def test_certify_takes_an_opaque_callable_production(tmp_path):
    # kcert.certify(production=fn, production_exact=False): fn is never called under the exact
    # policy (it would raise here), and the algebra gate is not applicable.
    script = ("import torch, kcert\n"
              "def opaque(inputs, p, params):\n"
              "    assert not p.is_exact, 'called under the exact policy'\n"
              "    x = inputs['x'].float()\n"
              "    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + inputs['w'].float())).to(torch.bfloat16)\n"
              "c = kcert.certify(family='rmsnorm', reference='gemma', production=opaque, production_exact=False,\n"
              "                  replicates=8, probe={'shape': {'tokens': 8, 'hidden': 64}})\n"
              "a = c.result['gates']['algebra']\n"
              "print(a['applicable'], a['reason'])\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("False not applicable: opaque production"), r.stdout


def test_a_nan_output_and_a_nan_gradient_fail_todays_checks(tmp_path):
    # Issue 54: assert_close, FlashAttention's and dynamo's rules as kcert emulates them skipped
    # non-finite elements, so a NaN passed the last two. Forward: a NaN output; backward: a
    # NaN in dx (RW16 certifies both directions).
    cpp, py, a, b = cpp_and_python(tmp_path, RW16, ("llama", "llama"), ("py_llama_function", "py_nan_dx"),
                                   "--isolation", "none")
    backward = b["results"][1]
    assert backward["verdict"] == "FAIL", json.dumps(backward)[:2000]
    assert all(backward["baselines"][c]["flagged"] for c in ("assert_close", "flash_attention", "dynamo_fp64")), \
        backward["baselines"]
    assert all(b["results"][0]["baselines"][c]["flagged"] is False for c in ("assert_close", "flash_attention", "dynamo_fp64"))
    case = tmp_path / "nan" / "n3.yaml"
    case.parent.mkdir()
    case.write_text(with_variants(N3.read_text(), "llama", "py_nan_output"))
    r = python_kcert("--isolation", "none", "suite", case, "--profile", "smoke", "--quiet")
    assert r.returncode == 1, r.stdout + r.stderr  # N3's expectations are not this production's
    # The falsifiability table counts the negative as flagged by each of today's checks.
    for check in (r"assert_close \(bf16 rtol 1\.6e-2\)", r"FlashAttention 2x \+ 1 ULP rule", r"dynamo fp64 RMSE 3x rule"):
        assert re.search(check + r"\s+1/1\s+0/0", r.stdout), r.stdout
