#include "harness/io/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kcert::io {

std::string size_in_words(std::uint64_t bytes) {
  return bytes >= (std::uint64_t{1} << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes) + " bytes";
}

std::string read_regular_file(const std::string& path, std::uint64_t max_bytes, Links links, const std::string& holder) {
  using Why = FileRefused::Why;
  // O_NONBLOCK: opening a FIFO must not wait for a writer before fstat can refuse it.
  // O_NOFOLLOW: a link as the last component fails with ELOOP instead of being followed.
  const int flags = O_RDONLY | O_NONBLOCK | O_CLOEXEC | (links == Links::refuse ? O_NOFOLLOW : 0);
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP && links == Links::refuse) throw FileRefused(Why::link, path + ": a symbolic link, not followed");
    throw FileRefused(Why::cannot_open, path + ": cannot open file: " + std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw FileRefused(Why::cannot_read, path + ": cannot read file: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode))
    throw FileRefused(Why::not_regular, path + ": not a regular file (a FIFO, device or folder), not read");
  const auto bound = size_in_words(max_bytes);
  if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    throw FileRefused(Why::too_large, path + ": " + std::to_string(st.st_size) + " bytes, more than the " + bound + " " +
                                          holder + " may hold; not read");
  }
  std::string text;
  text.reserve(static_cast<std::size_t>(st.st_size));
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw FileRefused(Why::cannot_read, path + ": cannot read file: " + std::strerror(errno));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
    if (text.size() > max_bytes)  // a file that grows while read is held to the same bound
      throw FileRefused(Why::too_large, path + ": more than the " + bound + " " + holder + " may hold; not read");
  }
  return text;
}

}  // namespace kcert::io
