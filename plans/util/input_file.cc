#include "plans/util/input_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "plans/util/error.h"
#include "plans/util/yaml_util.h"

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

// The inputs read so far in this process (see the header): a few per command, so a list searched whole.
struct ReadFile {
  dev_t dev;
  ino_t ino;
  std::string canonical;  // the path with links and ".." resolved when it was read ("" if that failed)
  InputRead input;
};

struct InputRegistry {
  std::mutex mutex;
  std::vector<ReadFile> files;
};

InputRegistry& registry() {
  static InputRegistry r;
  return r;
}

std::string canonical_path(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path c = std::filesystem::weakly_canonical(path, ec);
  return ec ? std::string() : c.string();
}

void remember_input(const std::string& path, std::string_view what, const struct stat& st) {
  ReadFile f{st.st_dev, st.st_ino, canonical_path(path), {path, std::string(what)}};
  InputRegistry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const ReadFile& g : r.files)
    if (g.dev == f.dev && g.ino == f.ino && g.canonical == f.canonical) return;  // read again: already known
  r.files.push_back(std::move(f));
}

}  // namespace

std::optional<InputRead> input_read_at(const std::string& path) {
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  const std::string canonical = canonical_path(path);
  InputRegistry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  for (const ReadFile& f : r.files) {
    if (!canonical.empty() && f.canonical == canonical) return f.input;
    // The same file through another name (a hard or symbolic link), while the input is still that file: once it is
    // gone (a temporary file deleted), its inode number may be given to an unrelated new file.
    if (exists && f.dev == st.st_dev && f.ino == st.st_ino) {
      struct stat now {};
      const std::string& at = f.canonical.empty() ? f.input.path : f.canonical;
      if (::stat(at.c_str(), &now) == 0 && now.st_dev == f.dev && now.st_ino == f.ino) return f.input;
    }
  }
  return std::nullopt;
}

void forget_inputs_read() {
  InputRegistry& r = registry();
  const std::lock_guard<std::mutex> lock(r.mutex);
  r.files.clear();
}

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
  // From here on it is an input of this run, read whole or not (plans/util/output_file.h writes over none).
  remember_input(path, what, st);
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
