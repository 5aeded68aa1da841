#pragma once
// Reading a file kcert was pointed at (issue 51: the loader, the K-hat reader and the store
// each had their own copy of this). Only a regular file is read: a FIFO blocked `upload` and
// `report` until someone wrote to it, a link to /dev/zero read until memory ran out (issue 53),
// and a case file as large as the disk aborted the nightly. Links are followed for a file the
// user named, and refused for one found in a folder (a controls folder holding
// `x.yaml -> /etc/shadow` must not have kcert, often root, read it).
#include <cstdint>
#include <stdexcept>
#include <string>

namespace kcert::io {

enum class Links { follow, refuse };

// Why a file was not read; what() names the file and says why, in words.
class FileRefused : public std::runtime_error {
 public:
  enum class Why { cannot_open, link, not_regular, too_large, cannot_read };
  FileRefused(Why why, const std::string& what) : std::runtime_error(what), why_(why) {}
  Why why() const { return why_; }

 private:
  Why why_;
};

// The file's bytes, at most `max_bytes` of them (also when it grows while read). `holder` words
// the bound in a refusal: "PATH: 5000000 bytes, more than the 1 MiB a case file may hold".
// Throws FileRefused.
std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, Links links, const std::string& holder);

// "4096 MiB" from 1 MiB on, else "N bytes".
std::string size_in_words(std::uint64_t bytes);

}  // namespace kcert::io
