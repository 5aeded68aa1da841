#pragma once
// SHA-256 (FIPS 180-4), for content hashes of test-case files and environment fingerprints.
// Small and dependency-free: kcert needs a stable digest, not a cryptographic library.
#include <string>
#include <string_view>

namespace kcert::store {

// Lower-case hex digest of the bytes.
std::string sha256_hex(std::string_view bytes);

}  // namespace kcert::store
