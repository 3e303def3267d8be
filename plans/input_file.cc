#include "plans/input_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "plans/error.h"
#include "plans/yaml_util.h"

namespace tptune {

namespace {

// Closes the descriptor on every path out of read_input_file.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

const char* file_type_text(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

}  // namespace

std::string size_text(size_t bytes) {
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return fmt::format("{} MiB", bytes >> 20);
  if (bytes >= (size_t{1} << 10) && bytes % (size_t{1} << 10) == 0) return fmt::format("{} KiB", bytes >> 10);
  return fmt::format("{} bytes", bytes);
}

size_t first_invalid_utf8(std::string_view text) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned c = s[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The lead byte fixes the length and the allowed range of the second byte (RFC 3629, table 3-7 of Unicode):
    // no overlong forms (C0, C1, E0 80..9F, F0 80..8F), no surrogates (ED A0..BF), nothing past U+10FFFF (F4 90..).
    size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    } else {
      return i;
    }
    if (i + len > n) return i;
    if (s[i + 1] < lo || s[i + 1] > hi) return i;
    for (size_t k = 2; k < len; ++k)
      if (s[i + k] < 0x80 || s[i + k] > 0xBF) return i;
    i += len;
  }
  return std::string_view::npos;
}

std::string read_input_file(const std::string& path, std::string_view what, size_t max_bytes) {
  const std::string name = yaml::shown(path, 200);
  Fd f;
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer, forever.
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (f.fd < 0) {
    const int e = errno;
    if (e == ENOENT || e == ENOTDIR) throw Error(fmt::format("{}: no such file (expected a {} file)", name, what));
    throw Error(fmt::format("{}: cannot read the {} file: {}", name, what, std::strerror(e)));
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0)
    throw Error(fmt::format("{}: cannot read the {} file: {}", name, what, std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw Error(fmt::format("{}: is a directory (expected a {} file)", name, what));
  if (!S_ISREG(st.st_mode))
    throw Error(fmt::format("{}: not a regular file ({}; expected a {} file)", name, file_type_text(st.st_mode), what));
  const std::string too_large =
      fmt::format("{}: larger than {}, the most a {} file may have", name, size_text(max_bytes), what);
  if (st.st_size > 0 && static_cast<uint64_t>(st.st_size) > max_bytes) throw Error(too_large);
  // Read to the end, whatever the size said (a file may grow, /proc files report 0), but never past max_bytes.
  std::string text;
  text.resize(std::min<size_t>(static_cast<size_t>(std::max<off_t>(st.st_size, 0)), max_bytes) + 1);
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (got > max_bytes) throw Error(too_large);
      text.resize(std::min(max_bytes + 1, std::max<size_t>(2 * text.size(), 4096)));
    }
    const ssize_t r = ::read(f.fd, text.data() + got, text.size() - got);
    if (r < 0) {
      if (errno == EINTR) continue;
      throw Error(fmt::format("{}: cannot read the {} file: {}", name, what, std::strerror(errno)));
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  if (got > max_bytes) throw Error(too_large);
  text.resize(got);
  if (text.empty()) throw Error(fmt::format("{}: empty file (expected a {} file)", name, what));
  if (const size_t bad = first_invalid_utf8(text); bad != std::string_view::npos) {
    const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<ptrdiff_t>(bad), '\n');
    throw Error(fmt::format("{}:{}: invalid UTF-8 (byte 0x{:02x}); expected a {} file in UTF-8", name, line,
                            static_cast<unsigned char>(text[bad]), what));
  }
  return text;
}

}  // namespace tptune
