#include "tests/catch_torch.hpp"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>

#include <stdlib.h>
#include <sys/stat.h>

#include "harness/kernels/registry.hpp"
#include "harness/testcase/loader.hpp"

using kcert::testcase::LoadError;
using kcert::testcase::parse_testcase;

namespace {

const kcert::testcase::FamilySchemas& schemas() {
  static const auto s = [] {
    kcert::kernels::Registry registry;
    kcert::kernels::register_builtin_families(registry);
    kcert::testcase::FamilySchemas out;
    for (const auto& name : registry.family_names()) out.emplace(name, registry.family(name).schema());
    return out;
  }();
  return s;
}

const std::string kValid = R"(schema: 1
id: demo
kind: negative
family: rmsnorm
mechanism: a sentence
references: [https://example.org/1]
reference: {variant: gemma}
production: {variant: gemma_offset_in_w, version: "v2"}
probe:
  dtype: bf16
  seed: 7
  shape: {tokens: 32, hidden: 64}
  weights: {kind: zero_centred, spread: 0.5}
expected: {algebra: PASS, bias: [WARN, FAIL]}
profiles:
  smoke:
    probe: {shape: {tokens: 8}}
    gates: {replicates: 64}
)";

kcert::contract::TestCase parse(const std::string& text, const std::string& profile = "") {
  return parse_testcase(text, "case.yaml", schemas(), profile);
}

// Replaces the first occurrence of `from` in the valid document.
std::string edit(const std::string& from, const std::string& to) {
  std::string s = kValid;
  const auto pos = s.find(from);
  REQUIRE(pos != std::string::npos);
  return s.replace(pos, from.size(), to);
}

}  // namespace

TEST_CASE("a valid test case loads with the documented defaults", "[loader]") {
  const auto tc = parse(kValid);
  CHECK(tc.id == "demo");
  CHECK(tc.kind == kcert::contract::Kind::negative);
  CHECK(tc.reference.variant == "gemma");
  CHECK(tc.reference.version == "kcert-builtin/1");  // the registered variant's version
  CHECK(tc.production.version == "v2");
  CHECK(tc.reference.params.number("eps") == 1e-6);
  CHECK(tc.probe.shift == 0.1);
  CHECK(tc.probe.params.integer("shape.tokens") == 32);
  CHECK(tc.probe.params.string("weights.kind") == "zero_centred");
  CHECK(tc.bucket_axis == "channel");
  CHECK(tc.gates.replicates == 1024);
  CHECK(tc.gates.max_replicates == 8192);
  CHECK(tc.gates.bias.z_star == 5.0);
  CHECK(tc.gates.variance.warn_k == 2.0);
  CHECK(tc.expected.gates.at("bias").size() == 2);
  CHECK(tc.profiles == std::vector<std::string>{"smoke"});
}

TEST_CASE("a profile overrides only what it names", "[loader]") {
  const auto tc = parse(kValid, "smoke");
  CHECK(tc.profile == "smoke");
  CHECK(tc.probe.params.integer("shape.tokens") == 8);
  CHECK(tc.probe.params.integer("shape.hidden") == 64);
  CHECK(tc.gates.replicates == 64);
  CHECK(tc.gates.algebra_replicates == 16);
  // A profile the case does not define leaves the contract unchanged.
  CHECK(parse(kValid, "nightly").probe.params.integer("shape.tokens") == 32);
}

TEST_CASE("expected_on holds one LibTorch release's expectation, checked like expected", "[loader]") {
  const auto tc = parse(edit("expected: {algebra: PASS, bias: [WARN, FAIL]}",
                             "expected: {algebra: PASS, bias: [WARN, FAIL]}\n"
                             "expected_on:\n  libtorch2: {algebra: PASS, bias: [PASS, WARN], note: fp32 compute on 2.x}"));
  REQUIRE(tc.expected_on.count("libtorch2") == 1);
  const auto& e = tc.expected_on.at("libtorch2");
  REQUIRE(e.gates.at("bias").size() == 2);
  CHECK(e.gates.at("bias")[0] == kcert::stats::Verdict::pass);
  CHECK(e.gates.at("bias")[1] == kcert::stats::Verdict::warn);
  CHECK(e.note == "fp32 compute on 2.x");
  CHECK(tc.expected.gates.at("bias").front() == kcert::stats::Verdict::warn);  // the default stays
  CHECK_THROWS_WITH(parse(edit("expected: {algebra: PASS, bias: [WARN, FAIL]}",
                               "expected: {algebra: PASS}\nexpected_on:\n  libtorch3: {algebra: PASS}")),
                    Catch::Contains("expected_on.libtorch3: unknown condition (expected one of: libtorch1, libtorch2, "
                                    "libtorch>=MAJOR.MINOR, cpu_bf16_gemm_in_bf16)"));
  // Release thresholds: MAJOR.MINOR, no leading zeros, no patch level.
  const auto t = parse(edit("expected: {algebra: PASS, bias: [WARN, FAIL]}",
                            "expected: {algebra: PASS}\nexpected_on:\n  libtorch>=2.11: {bias: FAIL}"));
  CHECK(t.expected_on.count("libtorch>=2.11") == 1);
  for (const char* bad : {"libtorch>=2", "libtorch>=2.1.0", "libtorch>=2.06", "libtorch>=x.1", "libtorch>2.1"}) {
    CHECK_THROWS_WITH(parse(edit("expected: {algebra: PASS, bias: [WARN, FAIL]}",
                                 std::string("expected: {algebra: PASS}\nexpected_on:\n  ") + bad + ": {bias: FAIL}")),
                      Catch::Contains("unknown condition"));
  }
  CHECK_THROWS_WITH(parse(edit("expected: {algebra: PASS, bias: [WARN, FAIL]}",
                               "expected: {algebra: PASS}\nexpected_on:\n  libtorch2: {bias: MAYBE}")),
                    Catch::Contains("expected_on.libtorch2.bias: expected PASS, INCONCLUSIVE, WARN or FAIL, got 'MAYBE'"));
}

TEST_CASE("an unknown key is rejected with its position and the allowed keys", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("kind: negative", "kind: negative\nkidn: x")),
                    Catch::StartsWith("case.yaml:4:1: kidn: unknown key (expected one of: schema, id, kind"));
  CHECK_THROWS_WITH(parse(edit("seed: 7", "seed: 7\n  shfit: 0.5")),
                    Catch::StartsWith("case.yaml:12:3: probe.shfit: unknown key"));
  CHECK_THROWS_WITH(parse(edit("{tokens: 32, hidden: 64}", "{tokens: 32, hidden: 64, heads: 2}")),
                    Catch::Contains("probe.shape.heads: unknown key (expected one of: hidden, tokens)"));
}

TEST_CASE("a wrong type names the field and what was expected", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("tokens: 32", "tokens: -3")),
                    "case.yaml:12:19: probe.shape.tokens: expected an integer >= 1, got -3");
  CHECK_THROWS_WITH(parse(edit("tokens: 32", "tokens: many")),
                    "case.yaml:12:19: probe.shape.tokens: expected an integer, got 'many'");
  CHECK_THROWS_WITH(parse(edit("seed: 7", "seed: 7\n  shift: high")),
                    Catch::StartsWith("case.yaml:12:10: probe.shift: expected a finite number, got 'high'"));
  CHECK_THROWS_WITH(parse(edit("dtype: bf16", "dtype: fp8")),
                    Catch::Contains("probe.dtype: expected bf16, fp16, fp32 or fp64, got 'fp8'"));
  CHECK_THROWS_WITH(parse(edit("bias: [WARN, FAIL]", "bias: MAYBE")),
                    Catch::Contains("expected.bias: expected PASS, INCONCLUSIVE, WARN or FAIL, got 'MAYBE'"));
  CHECK_THROWS_WITH(parse(edit("kind: zero_centred", "kind: ones")),
                    Catch::Contains("probe.weights.kind: expected one of around_one, zero_centred, got 'ones'"));
}

TEST_CASE("impossible shapes are rejected at the offending field", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("seed: 7", "seed: 7\n  outliers: {count: 100, magnitude: 8}")),
                    Catch::StartsWith("case.yaml:12:21: probe.outliers.count: expected at most probe.shape.hidden = 64"));
  CHECK_THROWS_WITH(parse(edit("gates: {replicates: 64}", "gates: {replicates: 64, max_replicates: 32}")),
                    Catch::Contains("gates.max_replicates: expected at least gates.replicates = 64, got 32"));
}

TEST_CASE("a typo inside a profile fails even when another profile is requested", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("gates: {replicates: 64}", "gates: {replicats: 64}")),
                    Catch::Contains("gates.replicats: unknown key"));
}

TEST_CASE("a broken base contract fails under a profile that overrides the broken field", "[loader]") {
  // The smoke profile sets tokens: 8, so a smoke run never reads the base value; the
  // nightly at contract shapes would stop on it. It must fail in CI too.
  const auto broken = edit("shape: {tokens: 32, hidden: 64}", "shape: {tokens: true, hidden: 64}");
  CHECK_THROWS_WITH(parse(broken, "smoke"), Catch::Contains("probe.shape.tokens"));
  CHECK_THROWS_WITH(parse(broken), Catch::Contains("probe.shape.tokens"));
  CHECK(parse(kValid, "smoke").profile == "smoke");
}

TEST_CASE("what the database cannot hold is refused at load (issue 53)", "[loader]") {
  // A NUL from YAML's "\0" and an id over the unique index's row limit made PostgreSQL refuse
  // the row, and the nightly stopped storing for the rest of the run.
  CHECK_THROWS_WITH(parse(edit("mechanism: a sentence", "mechanism: \"a\\0b\""), "smoke"),
                    Catch::Contains("mechanism: a NUL character"));
  CHECK_THROWS_WITH(parse(edit("id: demo", "id: " + std::string(201, 'a')), "smoke"),
                    Catch::Contains("id: at most 200 bytes, got 201"));
  CHECK_NOTHROW(parse(edit("id: demo", "id: " + std::string(200, 'a')), "smoke"));
}

TEST_CASE("replicate and bootstrap counts are bounded with the field named", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("gates: {replicates: 64}", "gates: {replicates: 64, max_replicates: 1000000000}"), "smoke"),
                    Catch::Contains("gates.max_replicates: expected at most 1048576 (2^20), got 1000000000"));
  CHECK_THROWS_WITH(parse(edit("gates: {replicates: 64}", "gates: {replicates: 2000000}"), "smoke"),
                    Catch::Contains("gates.replicates: expected at most 1048576"));
  // At 2 the bias gate's t test has one degree of freedom and every gate ERRORed (issue 53).
  CHECK_THROWS_WITH(parse(edit("gates: {replicates: 64}", "gates: {replicates: 2}"), "smoke"),
                    Catch::Contains("gates.replicates: expected at least 3 replicates"));
  CHECK_NOTHROW(parse(edit("gates: {replicates: 64}", "gates: {replicates: 3}"), "smoke"));
  CHECK_THROWS_WITH(parse(edit("gates: {replicates: 64}", "gates: {replicates: 64, variance: {bootstrap: 1000000000}}"), "smoke"),
                    Catch::Contains("gates.variance.bootstrap: expected at most 100000"));
}

TEST_CASE("a RoPE position stride that would wrap int64 is refused, not wrapped", "[loader]") {
  const std::string rope = R"(schema: 1
id: rope_stride
kind: positive
family: rope
mechanism: a sentence
references: [https://example.org/1]
reference: {variant: neox_fp32}
production: {variant: neox_fp32}
probe:
  dtype: bf16
  seed: 7
  shape: {tokens: 4, heads: 2, head_dim: 8}
  positions: {start: 1, stride: STRIDE}
)";
  const auto with = [&](const std::string& stride) {
    auto text = rope;
    return text.replace(text.find("STRIDE"), 6, stride);
  };
  CHECK_THROWS_WITH(parse(with("4611686018427387904")), Catch::Contains("probe.positions.stride: positions reach beyond 2^63"));
  CHECK_THROWS_WITH(parse(with("6000000")), Catch::Contains("positions reach 18000001, beyond 2^24"));
  CHECK(parse(with("1000")).id == "rope_stride");
}

TEST_CASE("duplicate keys, non-string keys and a second document are errors with a position", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("  seed: 7\n", "  seed: 7\n  seed: 8\n")),
                    Catch::Contains("case.yaml:12:3: probe.seed: duplicate key (first at line 11)"));
  CHECK_THROWS_WITH(parse(edit("  seed: 7\n", "  [a, b]: 7\n")), Catch::Contains("probe: keys must be plain strings, got a sequence"));
  CHECK_THROWS_WITH(parse(kValid + "---\nid: other\n"), Catch::Contains("a second YAML document (after ---) would be ignored"));
  CHECK_THROWS_WITH(parse(kValid + "...\n--- {id: other}\n"), Catch::Contains("a second YAML document"));
  // Markers that open or close the one document are fine, as are comments after it.
  CHECK(parse("---\n" + kValid).id == parse(kValid).id);
  CHECK(parse("%YAML 1.2\n---\n" + kValid + "...\n# end\n").id == parse(kValid).id);
  // A stray ',' first: yaml-cpp 0.7's LoadAll allocated without bound; now a plain error.
  CHECK_THROWS_WITH(parse(",\na: 1\n"), Catch::Contains("expected a mapping of test-case fields"));
}

TEST_CASE("aliases are checked once: a recursive alias and an alias bomb are errors at once", "[loader][hostile]") {
  // Segfaulted (the duplicate-key walk recursed through the cycle until the stack ran out).
  CHECK_THROWS_WITH(parse("schema: 1\nid: recursive\na: &a {b: *a}\n"),
                    Catch::Contains("case.yaml:3:11: a.b: alias *a refers to a node that contains it"));
  CHECK_THROWS_WITH(parse("schema: 1\nid: recursive\na: &a [1, [*a]]\n"),
                    Catch::Contains("a[1][0]: alias *a refers to a node that contains it"));
  // Fan-out: each level lists the previous one ten times, 10^10 nodes expanded. The walk
  // took minutes at depth 8 with a fan-out of two; this must fail fast with the limit named.
  std::string bomb = "schema: 1\nid: bomb\nl0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += "l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *l" : "*l") + std::to_string(i - 1);
    bomb += "]\n";
  }
  // CPU time, not wall time (issue 50): a busy machine stretches the latter, and the walk it
  // guards against took minutes.
  const std::clock_t start = std::clock();
  CHECK_THROWS_WITH(parse(bomb), Catch::Contains("case.yaml:7:") &&
                                     Catch::Contains("larger than 100000 nodes with its aliases expanded"));
  CHECK(static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC < 2.0);
  // Depth is bounded before yaml-cpp's recursive parser can exhaust the stack.
  CHECK_THROWS_WITH(parse("schema: 1\nid: deep\nprobe: " + std::string(100000, '[') + std::string(100000, ']') + "\n"),
                    Catch::Contains("case.yaml:3:") && Catch::Contains("nested deeper than 64 levels"));
  // Keys stay plain strings: an alias is not one, nor an empty key.
  CHECK_THROWS_WITH(parse("schema: 1\nk: &k id\n*k : x\n"), Catch::Contains("keys must be plain strings, got an alias"));
  // Ordinary aliases still load, and duplicates inside an anchored map are still found.
  CHECK(parse(edit("  seed: 7\n", "  seed: &s 7\n")).probe.seed == 7);
  CHECK_NOTHROW(parse(edit("profiles:\n  smoke:\n    probe: {shape: {tokens: 8}}\n",
                           "profiles:\n  smoke:\n    probe: &small {shape: {tokens: 8}}\n  ci:\n    probe: *small\n")));
  CHECK_THROWS_WITH(parse(edit("  seed: 7\n", "  seed: 7\n  extra: &w {kind: a, kind: b}\n")),
                    Catch::Contains("probe.extra.kind: duplicate key (first at line 12)"));
}

TEST_CASE("invalid UTF-8 and control characters are refused at load with line and column", "[loader][hostile]") {
  // Ran, then the JSON result could not be written: the nightly ended with an internal error.
  CHECK_THROWS_WITH(parse(edit("mechanism: a sentence", "mechanism: a sent\xff" "ence")),
                    Catch::Contains("case.yaml:5:18: byte 0xFF is not valid UTF-8"));
  CHECK_THROWS_WITH(parse(edit("mechanism: a sentence", "mechanism: a \xc0\xae")), Catch::Contains("byte 0xC0 is not valid UTF-8"));
  CHECK_THROWS_WITH(parse(edit("mechanism: a sentence", "mechanism: \xed\xa0\x80")), Catch::Contains("byte 0xED is not valid UTF-8"));
  CHECK_THROWS_WITH(parse(edit("mechanism: a sentence", "mechanism: truncated \xe2\x82")), Catch::Contains("not valid UTF-8"));
  CHECK_THROWS_WITH(parse(edit("mechanism: a sentence", "mechanism: \"bell \x07\"")),
                    Catch::Contains("case.yaml:5:18: control character 0x07 is not allowed"));
  // Real UTF-8 (accents, a bidi override, which terminals get escaped) is text.
  CHECK(parse(edit("mechanism: a sentence", "mechanism: caf\xc3\xa9 \xe2\x80\xae")).mechanism == "caf\xc3\xa9 \xe2\x80\xae");
}

TEST_CASE("a probe shift that swamps the spread in W is refused", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("  seed: 7\n", "  seed: 7\n  shift: 1.0e30\n")),
                    Catch::Contains("probe.shift: expected |shift| < 2^8 x scale = 256 for bf16"));
  CHECK(parse(edit("  seed: 7\n", "  seed: 7\n  shift: 16\n")).probe.shift == 16.0);
}

TEST_CASE("unknown families and variants list what is available", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("family: rmsnorm", "family: rmsnrom")),
                    Catch::Contains("family: no family 'rmsnrom' is registered; did you mean rmsnorm? (available: activation, attention, glu, layernorm, linear, loss, moe_combine, qkv_rope, residual_rmsnorm, rmsnorm, rope, router)"));
  CHECK_THROWS_WITH(parse(edit("variant: gemma}", "variant: gemma_fast}")),
                    Catch::Contains("reference.variant: family 'rmsnorm' has no variant 'gemma_fast' (available: "));
  // A typo near one name suggests it; nothing near (gemma_fast above) suggests nothing.
  CHECK_THROWS_WITH(parse(edit("variant: gemma_offset_in_w,", "variant: gemma_ofset_in_w,")),
                    Catch::Contains("production.variant: family 'rmsnorm' has no variant 'gemma_ofset_in_w'; did you mean gemma_offset_in_w? (available: "));
  CHECK_THROWS_WITH(parse(edit("variant: gemma}", "variant: gemma, params: {epsilon: 1}}")),
                    Catch::Contains("reference.params.epsilon: unknown key (expected one of: eps)"));
}

TEST_CASE("missing required fields and bad syntax are reported with a position", "[loader]") {
  CHECK_THROWS_WITH(parse(edit("mechanism: a sentence\n", "")), Catch::Contains("mechanism: required field is missing"));
  CHECK_THROWS_WITH(parse(edit("  seed: 7\n", "")), Catch::Contains("probe.seed: required integer is missing"));
  CHECK_THROWS_WITH(parse(edit("schema: 1", "schema: 2")), Catch::Contains("schema: expected 1"));
  CHECK_THROWS_WITH(parse("id: [unclosed\n"), Catch::StartsWith("case.yaml:2:1: YAML syntax error"));
  CHECK_THROWS_AS(kcert::testcase::load_testcase("/nonexistent.yaml", schemas()), LoadError);
}

TEST_CASE("math_modes: names the modes it sets, and rejects what is not a mode or a boolean", "[loader]") {
  const auto tc = parse(edit("profiles:", "math_modes: {tf32_matmul: true, deterministic_algorithms: false}\nprofiles:"));
  CHECK(tc.math_modes.tf32_matmul == true);
  CHECK(tc.math_modes.deterministic_algorithms == false);
  CHECK_FALSE(tc.math_modes.tf32_cudnn.has_value());
  CHECK_FALSE(parse(kValid).math_modes.tf32_matmul.has_value());
  CHECK_THROWS_WITH(parse(edit("profiles:", "math_modes: {tf32: true}\nprofiles:")),
                    Catch::Contains("case.yaml:15:14: math_modes.tf32: unknown key (expected one of: tf32_matmul, tf32_cudnn"));
  CHECK_THROWS_WITH(parse(edit("profiles:", "math_modes: {tf32_matmul: on}\nprofiles:")),
                    Catch::Contains("math_modes.tf32_matmul: expected true or false, got 'on'"));
}

TEST_CASE("a sweep certifies the case on each probe setting, merged after the profile", "[loader][sweep]") {
  const auto text = edit("expected: {algebra: PASS, bias: [WARN, FAIL]}",
                         "sweep:\n  - {name: negatives, probe: {shift: -2.0}}\n  - {name: long, probe: {shape: {tokens: 16}}}\n"
                         "expected: {algebra: PASS, bias: [WARN, FAIL]}");
  const auto tc = parse(text, "smoke");
  REQUIRE(tc.sweep.size() == 2);
  CHECK(tc.sweep[0].name == "negatives");
  CHECK(tc.sweep[0].testcase->probe.shift == -2.0);
  CHECK(tc.sweep[0].testcase->probe.params.integer("shape.tokens") == 8);  // the smoke profile's, kept
  CHECK(tc.sweep[0].testcase->sweep.empty());
  CHECK(tc.sweep[1].testcase->probe.params.integer("shape.tokens") == 16);
  CHECK(tc.sweep[1].testcase->probe.shift == 0.1);
  CHECK(tc.sweep[1].testcase->profile == "smoke");
  CHECK(tc.probe.shift == 0.1);  // the contract itself is unchanged
  CHECK(tc.sweep[0].probe_text == "{shift: -2.0}");
}

TEST_CASE("a malformed sweep names its file, line and field", "[loader][sweep]") {
  const auto with = [](const std::string& sweep) {
    return edit("expected: {algebra: PASS, bias: [WARN, FAIL]}", sweep + "\nexpected: {algebra: PASS, bias: [WARN, FAIL]}");
  };
  CHECK_THROWS_WITH(parse(with("sweep: []")), Catch::Contains("case.yaml:") && Catch::Contains("sweep: expected a non-empty list"));
  CHECK_THROWS_WITH(parse(with("sweep:\n  - {probe: {shift: 1.0}}")), Catch::Contains("sweep[0].name: required"));
  CHECK_THROWS_WITH(parse(with("sweep:\n  - {name: 'Bad Name', probe: {shift: 1.0}}")),
                    Catch::Contains("sweep[0].name: expected at most 40 characters of [a-z0-9_-]"));
  CHECK_THROWS_WITH(parse(with("sweep:\n  - {name: a, probe: {shift: 1.0}}\n  - {name: a, probe: {shift: 2.0}}")),
                    Catch::Contains("sweep[1].name: 'a' is used twice"));
  CHECK_THROWS_WITH(parse(with("sweep:\n  - {name: contract, probe: {shift: 1.0}}")), Catch::Contains("is used twice (or is 'contract'"));
  CHECK_THROWS_WITH(parse(with("sweep:\n  - {name: a, gates: {replicates: 2}}")), Catch::Contains("sweep[0].gates: unknown key"));
  // A setting's probe is validated as the whole case: an impossible shape names its line.
  CHECK_THROWS_WITH(parse(with("sweep:\n  - {name: a, probe: {shape: {tokens: -3}}}")),
                    Catch::Contains("case.yaml:15:39: probe.shape.tokens") && Catch::Contains("(in sweep setting 'a')"));
  CHECK_THROWS_WITH(parse(with("sweep:\n  - {name: a, probe: {}}")), Catch::Contains("sweep[0].probe: expected at least one"));
}

TEST_CASE("direction: backward reads the dy probe, the gradients and their buckets", "[loader][backward]") {
  const auto with = [](const std::string& text) {
    return edit("expected: {algebra: PASS, bias: [WARN, FAIL]}", text + "\nexpected: {algebra: PASS, bias: [WARN, FAIL]}");
  };
  const auto forward = parse(kValid);
  CHECK(forward.direction == kcert::contract::Direction::forward);
  const auto defaults = parse(with("direction: backward"));
  CHECK(defaults.direction == kcert::contract::Direction::backward);
  CHECK(defaults.backward.dy_law == kcert::contract::DyLaw::shifted);
  CHECK(defaults.backward.dy_shift == 0.5);
  CHECK(defaults.backward.gradients.empty());  // every one the family declares
  const auto full = parse(with("direction: backward\nbackward:\n  dy: {kind: self_correlated, scale: 2.0}\n"
                               "  gradients: [dw, dx]\n  buckets: {dx: row}"));
  CHECK(full.backward.dy_law == kcert::contract::DyLaw::self_correlated);
  CHECK(full.backward.dy_scale == 2.0);
  CHECK(full.backward.gradients == std::vector<std::string>{"dw", "dx"});
  CHECK(full.backward.buckets.at("dx") == "row");
  // Every law of the table (contract/dy_law.hpp) is a kind a case may name, and reads back as itself.
  for (const auto& law : kcert::contract::kDyLaws) {
    INFO(law.name);
    const auto c = parse(with("direction: backward\nbackward: {dy: {kind: " + std::string(law.name) + "}}"));
    CHECK(c.backward.dy_law == law.law);
    CHECK(kcert::contract::to_string(c.backward.dy_law) == law.name);
  }
  const auto zero = parse(with("direction: backward\nbackward: {dy: {kind: zero_mean}}"));
  CHECK(zero.backward.dy_shift == 0.0);
}

TEST_CASE("a malformed backward names its file, line, field and what was expected", "[loader][backward]") {
  const auto with = [](const std::string& text) {
    return edit("expected: {algebra: PASS, bias: [WARN, FAIL]}", text + "\nexpected: {algebra: PASS, bias: [WARN, FAIL]}");
  };
  CHECK_THROWS_WITH(parse(with("direction: sideways")),
                    Catch::Contains("case.yaml:14:12: direction: expected forward (the outputs), backward (the gradients) or both"));
  CHECK_THROWS_WITH(parse(with("backward: {dy: {kind: shifted}}")),
                    Catch::Contains("backward: only a case with `direction: backward` or `both` has a backward probe"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {dy: {kind: ones}}")),
                    Catch::Contains("backward.dy.kind: expected shifted, self_correlated, zero_mean, heavy_tailed or loss_shaped, got 'ones'"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {dy: {kind: zero_mean, shift: 1.0}}")),
                    Catch::Contains("backward.dy.shift: only the shifted and heavy_tailed kinds have a shift"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {dy: {kind: shifted, margin: 4}}")),
                    Catch::Contains("backward.dy.margin: only the loss_shaped kind has a margin"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {dy: {zero_rows: -1}}")),
                    Catch::Contains("backward.dy.zero_rows: expected an integer >= 0"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {dy: {huge_row: 1e9}}")),
                    Catch::Contains("backward.dy.huge_row: expected a factor <= 65536"));
  const auto stress = parse(with("direction: backward\nbackward: {dy: {kind: loss_shaped, margin: 12, zero_rows: 2, huge_row: 64}}"));
  CHECK(stress.backward.dy_margin == 12.0);
  CHECK(stress.backward.dy_zero_rows == 2);
  CHECK(stress.backward.dy_huge_row == 64.0);
  CHECK(stress.backward.dy_shift == 0.0);
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {dy: {scale: 0}}")),
                    Catch::Contains("backward.dy.scale: expected a positive number"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {gradients: [db]}")),
                    Catch::Contains("backward.gradients[0]: family 'rmsnorm' has no gradient 'db' (available: dx, dw)"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {gradients: [dx, dx]}")),
                    Catch::Contains("'dx' is listed twice"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {buckets: {dw: channel}}")),
                    Catch::Contains("backward.buckets.dw: gradient 'dw' has no bucket axis 'channel' (available: element)"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {dY: {}}")), Catch::Contains("backward.dY: unknown key"));
}

TEST_CASE("direction: both yields one case per direction, each with its own expectation", "[loader][backward]") {
  const auto text = edit("expected: {algebra: PASS, bias: [WARN, FAIL]}",
                         "direction: both\nbackward: {gradients: [dw]}\n"
                         "expected:\n  forward: {bias: FAIL}\n  backward:\n    bias: [WARN, FAIL]\n"
                         "    gradients: {dw: {variance: FAIL}}\n"
                         "expected_on:\n  libtorch2: {backward: {algebra: PASS}}");
  const auto cases = kcert::testcase::parse_testcases(text, "case.yaml", schemas());
  REQUIRE(cases.size() == 2);
  const auto& f = cases[0];
  const auto& b = cases[1];
  CHECK(f.id == "demo");
  CHECK(b.id == "demo@backward");
  CHECK(f.case_id == "demo");
  CHECK(b.case_id == "demo");
  CHECK(f.both_directions);
  CHECK(b.both_directions);
  CHECK(f.direction == kcert::contract::Direction::forward);
  CHECK(b.direction == kcert::contract::Direction::backward);
  CHECK((f.expected.gates.at("bias") == std::vector<kcert::stats::Verdict>{kcert::stats::Verdict::fail}));
  CHECK(f.expected.gradients.empty());
  CHECK(b.expected.gates.at("bias").size() == 2);
  CHECK((b.expected.gradients.at("dw").at("variance") == std::vector<kcert::stats::Verdict>{kcert::stats::Verdict::fail}));
  CHECK(f.expected_on.at("libtorch2").empty());  // the forward half names nothing under it
  CHECK(b.expected_on.at("libtorch2").gates.count("algebra") == 1);
  CHECK(b.backward.gradients == std::vector<std::string>{"dw"});
  // A single-direction file is one case, its id its own.
  const auto one = kcert::testcase::parse_testcases(kValid, "case.yaml", schemas());
  REQUIRE(one.size() == 1);
  CHECK(one[0].case_id == "demo");
  CHECK_FALSE(one[0].both_directions);
}

TEST_CASE("per-gradient expectations name a certified gradient and a gate", "[loader][backward]") {
  const auto with = [](const std::string& text) {
    return edit("expected: {algebra: PASS, bias: [WARN, FAIL]}", text);
  };
  const auto ok = parse(with("direction: backward\nexpected: {bias: FAIL, gradients: {dw: {bias: FAIL}, dx: {bias: [PASS, WARN]}}}"));
  CHECK(ok.expected.gradients.size() == 2);
  CHECK_THROWS_WITH(parse(with("direction: backward\nbackward: {gradients: [dx]}\nexpected: {gradients: {dw: {bias: FAIL}}}")),
                    Catch::Contains("expected.gradients.dw: the case certifies no gradient 'dw' (it certifies: dx)"));
  CHECK_THROWS_WITH(parse(with("direction: backward\nexpected: {gradients: {dw: {speed: FAIL}}}")),
                    Catch::Contains("expected.gradients.dw.speed: unknown key"));
  CHECK_THROWS_WITH(parse(with("expected: {gradients: {dw: {bias: FAIL}}}")),
                    Catch::Contains("expected.gradients: unknown key"));
  CHECK_THROWS_WITH(parse(with("direction: both\nexpected: {bias: FAIL}")),
                    Catch::Contains("expected.bias: unknown key (expected one of: forward, backward)"));
  CHECK_THROWS_WITH(parse(with("direction: both\nexpected: {backward: {gradients: {db: {bias: FAIL}}}}")),
                    Catch::Contains("expected.backward.gradients.db: the case certifies no gradient 'db'"));
  CHECK_THROWS_WITH(parse(with("direction: both\nexpected: {forward: {gradients: {dw: {bias: FAIL}}}}")),
                    Catch::Contains("expected.forward.gradients: unknown key"));
}

// Issue 53: a controls folder is a checkout others write to. A link in it is listed and
// refused by name, never read; a FIFO does not block; a stray huge file is one file's error;
// and no load error quotes a line of a file that is not a case (the secret behind a link).
TEST_CASE("links, FIFOs and huge files in a controls folder are refused by name, their content never quoted",
          "[loader][hostile]") {
  namespace fs = std::filesystem;
  using kcert::testcase::collect_testcase_files;
  using kcert::testcase::load_testcases;
  char tmpl[] = "/tmp/kcert-loader-links.XXXXXX";
  REQUIRE(::mkdtemp(tmpl) != nullptr);
  const fs::path dir(tmpl);
  struct Cleanup {
    fs::path p;
    ~Cleanup() { std::error_code ec; fs::remove_all(p, ec); }
  } cleanup{dir};
  const std::string secret_line = "root:*:20228:0:99999:7:::";
  fs::create_directories(dir / "controls" / "sub");
  fs::create_directories(dir / "elsewhere");
  { std::ofstream(dir / "secret") << secret_line << "\n"; }
  { std::ofstream(dir / "elsewhere" / "a.yaml") << kValid; }
  { std::ofstream(dir / "controls" / "ok.yaml") << kValid; }
  fs::create_symlink(dir / "secret", dir / "controls" / "link.yaml");
  fs::create_symlink(dir / "nowhere", dir / "controls" / "dangling.yaml");
  fs::create_directory_symlink(dir / "elsewhere", dir / "controls" / "linked-folder");
  REQUIRE(::mkfifo((dir / "controls" / "sub" / "fifo.yaml").c_str(), 0600) == 0);
  { std::ofstream(dir / "controls" / "huge.yaml") << std::string(kcert::testcase::kMaxCaseFileBytes + 1, '#'); }

  const auto files = collect_testcase_files({(dir / "controls").string()});
  REQUIRE(files.size() == 6);  // ok, link, dangling, linked-folder, huge, sub/fifo: none skipped silently
  for (const auto& f : files) {
    INFO(f);
    if (fs::path(f).filename() == "ok.yaml") {
      CHECK(load_testcases(f, schemas()).front().id == "demo");
      continue;
    }
    try {
      (void)load_testcases(f, schemas());
      FAIL("loaded " << f);
    } catch (const LoadError& e) {
      const std::string what = e.what();
      CHECK(what.rfind(f + ": ", 0) == 0);
      CHECK(what.find("root") == std::string::npos);
      if (fs::path(f).filename() == "link.yaml" || fs::path(f).filename() == "dangling.yaml" ||
          fs::path(f).filename() == "linked-folder") {
        CHECK_THAT(what, Catch::Contains("a symbolic link, not followed"));
      } else if (fs::path(f).filename() == "fifo.yaml") {
        CHECK_THAT(what, Catch::Contains("not a regular file"));
      } else {
        CHECK_THAT(what, Catch::Contains("more than the 1 MiB a case file may hold"));
      }
    }
  }
  // A link the user names is what they asked for: its target is read.
  fs::create_symlink(dir / "elsewhere" / "a.yaml", dir / "named.yaml");
  const auto named = collect_testcase_files({(dir / "named.yaml").string()});
  REQUIRE(named.size() == 1);
  CHECK(load_testcases(named.front(), schemas()).front().id == "demo");
  // Read straight (a secret copied in, not linked), the content is still not quoted: a key or
  // value that is not a plausible word is shown by its size only.
  try {
    (void)parse(secret_line + "\n");
    FAIL("parsed the secret");
  } catch (const LoadError& e) {
    CHECK(std::string(e.what()).find("root") == std::string::npos);
    CHECK_THAT(e.what(), Catch::Contains("bytes, not shown"));
  }
}
