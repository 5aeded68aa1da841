#pragma once
// The one Catch2 include of the tests, for Catch2 2 (Debian 12, single header) and Catch2 3
// (Debian 13, a compiled library with split headers). CMake sets KCERT_CATCH2_MAJOR.
// The tests are written against the 2.x spelling; under 3.x the few names that moved are
// brought back here, so no test file has a version guard.
// LibTorch's logging header defines CHECK as a fatal assertion; the LibTorch-facing test
// targets get LibTorch's headers before anything else (their precompiled header), so the
// Catch assertion is made the only CHECK here, whichever header came first.
#undef CHECK
#if KCERT_CATCH2_MAJOR >= 3
#include <catch2/catch_all.hpp>

#include <string>

using Catch::Approx;  // 2.x exported Approx into the global namespace
namespace Catch {
// 2.x's Catch::Contains(string) became Catch::Matchers::ContainsSubstring in 3.x.
inline Matchers::StringContainsMatcher Contains(const std::string& text,
                                                CaseSensitive sensitivity = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(text, sensitivity);
}
using Matchers::StartsWith;
}  // namespace Catch
#else
#include <catch2/catch.hpp>
#endif
