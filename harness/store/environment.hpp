#pragma once
// The environment a result was produced in: hardware, compilers, LibTorch and its BLAS and
// oneDNN state, OS. Results are keyed by its fingerprint, computed from identity fields
// only (never speeds, load or host names), so the same machine and stack always map to the
// same key.
#include <nlohmann/json.hpp>

#include <string>

namespace kcert::store {

struct Environment {
  nlohmann::json identity;  // the fields the fingerprint hashes (sorted keys)
  nlohmann::json details;   // recorded, not hashed (e.g. the full LibTorch build config)
  std::string fingerprint;  // first 16 hex digits of sha256(identity)
};

// What a front end other than the kcert binary brings into this process's environment: the
// Python module records its interpreter, torch and the modules its kernel files imported, and
// each file's sha256 (a transformers release is part of what a reference kernel computes).
// Process-wide, like the thread policy; detect_environment() puts it in the identity under
// "front_end" (absent for the kcert binary, whose fingerprints stay what they were).
void set_front_end(nlohmann::json description);

// Detects this process's environment. When KCERT_ENVIRONMENT_FILE names a JSON object, its
// fields override or extend the identity (to describe a container image, or to simulate
// another machine in tests).
Environment detect_environment();

// The environment in words, for a person: "AMD EPYC (x86_64; avx2, avx512f, ...), no GPU,
// LibTorch 1.13.0 (CPU capability AVX2), BLAS openblas-pthread (core Haswell, 1 thread),
// Debian GNU/Linux 12 (bookworm), kcert built with GCC 12.2.0 [0b05a24941677e5e]".
std::string describe_environment(const Environment& env);

// Recomputes the fingerprint from an identity object.
std::string fingerprint_of(const nlohmann::json& identity);

}  // namespace kcert::store
