// The fast form of the libFuzzer target, for CTest: the same LLVMFuzzerTestOneInput over the
// seed corpus (tests/fuzz/corpus, the golden hostile inputs, the controls) without libFuzzer
// or sanitizers, built with the regular compiler. An exception other than LoadError escapes
// and fails the test, naming the file; a crash or a hang fails it too (CTest's timeout).
//   fuzz_loader_replay FILE...
#include <cstddef>
#include <cstdint>
#include <exception>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

int main(int argc, char** argv) {
  int replayed = 0;
  for (int i = 1; i < argc; ++i) {
    std::ifstream in(argv[i], std::ios::binary);
    if (!in) {
      std::cerr << argv[i] << ": cannot open\n";
      return 2;
    }
    const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    try {
      LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    } catch (const std::exception& e) {
      std::cerr << argv[i] << ": escaped the loader: " << e.what() << "\n";
      return 1;
    }
    ++replayed;
  }
  std::cout << replayed << " inputs replayed, each a case or a LoadError\n";
  return replayed > 0 ? 0 : 2;
}
