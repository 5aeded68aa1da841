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

// Detects this process's environment. When KCERT_ENVIRONMENT_FILE names a JSON object, its
// fields override or extend the identity (to describe a container image, or to simulate
// another machine in tests).
Environment detect_environment();

// Recomputes the fingerprint from an identity object.
std::string fingerprint_of(const nlohmann::json& identity);

}  // namespace kcert::store
