"""kcert.certify() and the pytest plugin (issue 33): a certification beside assert_close tests,
in three lines; tested through pytester in a subprocess, as a user's test run would be."""
import json

pytest_plugins = ["pytester"]

TEST_FILE = """
import pytest
import torch


def gemma_fp32_gain(inputs, p, params):
    u = p.up(inputs["x"])
    return p.round_w(u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-6) * (1.0 + p.up(inputs["w"])))


def gemma_bf16_gain(inputs, p, params):  # N1: the gain 1 + w rounded to bf16 per channel
    u = p.up(inputs["x"])
    gain = p.round_w(p.up(inputs["w"]) + 1.0)
    return p.round_w(u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + 1e-6) * p.up(gain))


PROBE = {"seed": 29402, "shift": 0.5, "shape": {"tokens": 128, "hidden": 256},
         "weights": {"kind": "zero_centred", "spread": 0.5}}


@pytest.mark.parametrize("production", [gemma_fp32_gain, gemma_bf16_gain], ids=["fp32_gain", "bf16_gain"])
def test_gemma(kcert, production):
    kcert.certify(family="rmsnorm", reference="gemma", production=production, probe=PROBE,
                  buckets="channel").assert_pass()
"""


def test_the_defective_twin_fails_with_its_bucket_named(pytester):
    pytester.makepyfile(test_gemma=TEST_FILE)
    r = pytester.runpytest_subprocess("-p", "kcert.pytest_plugin", "--kcert-replicates", "256",
                                      "--kcert-json", "out.json")
    r.assert_outcomes(passed=1, failed=1)
    r.stdout.fnmatch_lines([
        "*kcert: certify_production_gemma_bf16_gain against gemma (rmsnorm): FAIL*",
        "*bias FAIL: of 256 channel buckets*",
        "*signed: worst channel 29: z -79.82*",
        "*repro: seed 29402*",
    ])
    r.stdout.fnmatch_lines(["*kcert certifications*", "*test_gemma?fp32_gain?*PASS*", "*test_gemma?bf16_gain?*FAIL*"])
    document = json.loads((pytester.path / "out.json").read_text())
    assert [res["verdict"] for res in document["results"]] == ["PASS", "FAIL"]
    assert document["results"][1]["test"].endswith("test_gemma[bf16_gain]")


def test_inconclusive_follows_the_option(pytester):
    # At R = 4 the bias gate cannot see N1's 0.45 ULP at its floor: INCONCLUSIVE, not PASS.
    pytester.makepyfile(test_gemma=TEST_FILE)
    r = pytester.runpytest_subprocess("-p", "kcert.pytest_plugin", "--kcert-replicates", "4", "-k", "bf16_gain",
                                      "--kcert-inconclusive", "skip", "-rs")
    r.assert_outcomes(skipped=1)
    r.stdout.fnmatch_lines(["*kcert: INCONCLUSIVE*"])
    r = pytester.runpytest_subprocess("-p", "kcert.pytest_plugin", "--kcert-replicates", "4", "-k", "bf16_gain")
    r.assert_outcomes(failed=1)
    r.stdout.fnmatch_lines(["*bias INCONCLUSIVE*"])


def test_bad_input_is_a_kcert_error_with_kcerts_message(pytester):
    pytester.makepyfile(test_bad="""
import pytest
import kcert

def test_unknown_variant():
    with pytest.raises(kcert.KcertError, match="family 'rmsnorm' has no variant 'nope'"):
        kcert.certify(family="rmsnorm", reference="gemma", production="nope")
""")
    r = pytester.runpytest_subprocess("-p", "kcert.pytest_plugin")
    r.assert_outcomes(passed=1)
