"""Python kernels run by the kcert binary (issue 33): a case's `python:` key and `kcert --python
FILE` describe the file in a `python -m kcert` process, the case loads against stand-ins and
runs in a Python worker (harness/runner/python_route.hpp). The controls that name
testcases/python/hf_references.py are the nightly's transformers twins."""
import json
import os
import subprocess

import pytest

from test_python_variants import KCERT, N3, SOURCE, comparable

HF = SOURCE / "testcases/python/hf_references.py"
N3_HF = SOURCE / "testcases/negative/rmsnorm/n3_rmsnorm_cast_before_weight_transformers.yaml"


def has_transformers():
    try:
        import transformers  # noqa: F401
        return True
    except Exception:
        return False


def kcert(*args):
    return subprocess.run([KCERT, *map(str, args)], capture_output=True, text=True)


def run_json(tmp_path, name, *args):
    out = tmp_path / f"{name}.json"
    p = kcert(*args, "--profile", "smoke", "--quiet", "--brief", "--json", out)
    return p, (json.loads(out.read_text()) if out.exists() else None)


def test_a_case_naming_python_code_is_skipped_with_the_remedy_unless_its_file_is_named(tmp_path):
    p, doc = run_json(tmp_path, "skip", "run", N3_HF)
    assert p.returncode == 0, p.stdout + p.stderr
    r = doc["results"][0]
    assert r["verdict"] == "SKIP", json.dumps(r)[:2000]
    assert "a case file does not run code on its own" in r["skipped"] and "--python" in r["skipped"]
    assert str(HF) in r["skipped"]


TWINS = sorted(SOURCE.glob("testcases/*/*/*_transformers.yaml"))


@pytest.mark.skipif(not has_transformers(), reason="transformers is not importable by this Python")
def test_the_transformers_twins_run_in_python_workers_and_meet_their_controls_expectations(tmp_path):
    # The nightly's way: the kcert binary names the file, each twin runs in a Python worker.
    assert len(TWINS) >= 5
    p, doc = run_json(tmp_path, "twins", "--python", HF, "run", *TWINS)
    twins = {r["id"]: r for r in doc["results"]}
    c, cpp = run_json(tmp_path, "cpp", "run", *[str(t).replace("_transformers.yaml", ".yaml") for t in TWINS])
    # A twin of a control in both directions has its backward result too: "<id>_transformers@backward".
    replays = {r["id"].replace("@backward", "") + "_transformers" + ("@backward" if r["id"].endswith("@backward") else ""): r
               for r in cpp["results"]}
    for twin_id, r in twins.items():
        assert r["verdict"] not in ("ERROR", "SKIP") and r["unexpected"] == [], json.dumps(r)[:3000]
        assert r["reference"]["variant"].startswith("transformers_")
        # The verdicts of the C++ replays, gate by gate (docs/python.md has the figures).
        for gate in ("algebra", "bias", "variance"):
            assert r["gates"][gate]["verdict"] == replays[twin_id]["gates"][gate]["verdict"], (twin_id, gate)
    assert p.returncode == c.returncode, p.stdout + p.stderr


@pytest.mark.skipif(not has_transformers(), reason="transformers is not importable by this Python")
def test_where_the_module_is_the_replay_the_results_are_the_same_bits(tmp_path):
    # N3's twin (reference: transformers' LlamaRMSNorm) through the kcert binary against N3
    # itself (reference: kcert's C++ `llama` replay): the same results, bit for bit.
    p, doc = run_json(tmp_path, "hf", "--python", HF, "run", N3_HF)
    c, cpp = run_json(tmp_path, "cpp", "run", N3)
    assert p.returncode == c.returncode, p.stdout + p.stderr
    (a,), (b,) = comparable(cpp), comparable(doc)
    a.pop("id"), b.pop("id")
    assert a == b
    assert doc["results"][0]["reference"]["variant"] == "transformers_llama_rmsnorm"


@pytest.mark.skipif(has_transformers(), reason="transformers is importable here")
def test_without_transformers_the_twin_is_skipped_saying_so(tmp_path):
    p, doc = run_json(tmp_path, "hf", "--python", HF, "run", N3_HF)
    assert p.returncode == 0, p.stdout + p.stderr
    r = doc["results"][0]
    assert r["verdict"] == "SKIP" and "transformers cannot be imported here" in r["skipped"], json.dumps(r)[:2000]


def test_a_variant_name_the_file_does_not_define_is_a_load_error(tmp_path):
    case = tmp_path / "typo.yaml"
    case.write_text(N3_HF.read_text().replace("python: [../../python/hf_references.py]", f"python: [{HF}]")
                    .replace("variant: transformers_llama_rmsnorm", "variant: transformers_llama_rmsnrom"))
    p = kcert("--python", HF, "run", case, "--profile", "smoke", "--quiet")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "has no variant 'transformers_llama_rmsnrom'" in p.stderr and "transformers_llama_rmsnorm" in p.stderr


def test_a_file_that_fails_to_import_is_refused_with_pythons_words(tmp_path):
    bad = tmp_path / "bad_kernels.py"
    bad.write_text("import kcert\nraise RuntimeError('this file is broken on purpose')\n")
    p = kcert("--python", bad, "list")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "could not import it" in p.stderr and "this file is broken on purpose" in p.stderr


def test_the_binary_lists_the_described_variants():
    p = kcert("--python", HF, "list", "rmsnorm")
    assert p.returncode == 0, p.stderr
    assert "transformers_llama_rmsnorm" in p.stdout and "transformers_gemma_rmsnorm" in p.stdout


def test_what_a_kernel_file_prints_at_import_does_not_break_its_description(tmp_path):
    chatty = tmp_path / "chatty_kernels.py"
    chatty.write_text("import kcert\nprint('a banner on stdout')\n"
                      "@kcert.variant('rmsnorm', 'chatty_copy')\n"
                      "def chatty_copy(inputs, p, params):\n    return p.round_w(p.up(inputs['x']))\n")
    p = kcert("--python", chatty, "list", "rmsnorm")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "chatty_copy" in p.stdout


def test_python_case_keys_are_checked(tmp_path):
    # An empty list tolerates nothing (a typo is a load error), and a missing file is named.
    empty = tmp_path / "empty.yaml"
    empty.write_text(N3_HF.read_text().replace("python: [../../python/hf_references.py]", "python: []"))
    p = kcert("run", empty, "--profile", "smoke", "--quiet")
    assert p.returncode == 2 and "has no variant 'transformers_llama_rmsnorm'" in p.stderr, p.stdout + p.stderr
    missing = tmp_path / "missing.yaml"
    missing.write_text(N3_HF.read_text().replace("python: [../../python/hf_references.py]", "python: [nowhere.py]"))
    p = kcert("--python", HF, "run", missing, "--profile", "smoke", "--quiet")
    assert p.returncode == 2 and "python: " + str(tmp_path / "nowhere.py") + ": no such file" in p.stderr, p.stdout + p.stderr


def test_the_worker_does_not_import_from_the_folder_kcert_runs_in(tmp_path):
    # python -m puts the current folder first on sys.path: a planted module there must not run.
    (tmp_path / "transformers.py").write_text("raise SystemExit('planted module imported')\n")
    p = subprocess.run([os.path.abspath(KCERT), "--python", HF, "list", "rmsnorm"], capture_output=True, text=True, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "planted" not in p.stdout + p.stderr
