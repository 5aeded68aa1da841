// libFuzzer target for the case loader (-DKCERT_FUZZ=ON, bench/fuzz-loader.sh). The property:
// whatever the bytes, parse_testcase returns a case or throws LoadError (a message with file,
// line, field). Any other exception escapes and libFuzzer reports it as a crash, as it does
// for a sanitizer report: the "internal error ... bad conversion" class of bug.
// Free of LibTorch: the loader and its schemas are instrumented here; the family schemas come
// from the gcc-built libkcert (kernels/builtin_schemas.hpp).
#include <cstddef>
#include <cstdint>
#include <string>

#include "harness/kernels/builtin_schemas.hpp"
#include "harness/testcase/loader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const kcert::testcase::FamilySchemas schemas = kcert::kernels::builtin_family_schemas();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (const char* profile : {"", "smoke"}) {
    try {
      (void)kcert::testcase::parse_testcase(text, "fuzz.yaml", schemas, profile);
    } catch (const kcert::testcase::LoadError&) {
      // the expected outcome for bad input
    }
  }
  return 0;
}
