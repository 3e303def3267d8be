#include "plans/util/output_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <streambuf>

#include "plans/util/error.h"
#include "plans/util/input_file.h"
#include "plans/util/yaml_util.h"

namespace tptune {

namespace {

namespace fs = std::filesystem;

std::string named(std::string_view option, const std::string& path) {
  return option.empty() ? yaml::shown(path, 200) : fmt::format("{} {}", option, yaml::shown(path, 200));
}

[[noreturn]] void fail(std::string_view option, const std::string& path, int err) {
  throw Error(fmt::format("{}: cannot write: {}", named(option, path), std::strerror(err)));
}

// A streambuf over a file descriptor that remembers the first failed write's errno (std::ofstream forgets it).
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd) { setp(buf_, buf_ + sizeof buf_); }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    const char* p = pbase();
    while (p < pptr() && error_ == 0) {
      const ssize_t n = ::write(fd_, p, static_cast<size_t>(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0)
        error_ = n < 0 ? errno : EIO;
      else
        p += n;
    }
    setp(buf_, buf_ + sizeof buf_);
    return error_ == 0;
  }
  int fd_;
  int error_ = 0;
  char buf_[1 << 16];
};

// The file a path finally names: a symlink's target (so that the link stays a link), else the path itself.
std::string resolve_target(const std::string& path) {
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(path, ec))) {
    const fs::path t = fs::canonical(path, ec);
    if (!ec) return t.string();
  }
  return path;
}

// The one check every output passes (OutputFile, and so write_output and write_outputs; refuse_overwriting_inputs
// too): an output over any file this run has read through read_input_file, by whatever route, is refused.
void refuse_an_input_read(std::string_view option, const std::string& path) {
  if (const std::optional<InputRead> in = input_read_at(path))
    throw Error(fmt::format("{}: is also the {} {}; refusing to overwrite an input (write to another path)",
                            named(option, path), in->what, yaml::shown(in->path, 200)));
}

mode_t current_umask() {
  const mode_t m = ::umask(0);
  ::umask(m);
  return m;
}

}  // namespace

struct OutputFile::Impl {
  std::string option, path, target, temp;
  int fd = -1;
  bool in_place = false;  // a device or FIFO: written directly
  bool finished = false, renamed = false;
  std::unique_ptr<FdBuf> buf;
  std::unique_ptr<std::ostream> os;
};

OutputFile::OutputFile(std::string option, std::string path) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.option = std::move(option);
  m.path = std::move(path);
  if (m.path.empty()) throw Error(fmt::format("{}: expected a file name, got ''", m.option));
  m.target = resolve_target(m.path);
  struct stat st {};
  const bool exists = ::stat(m.target.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode))
    throw Error(fmt::format("{}: is a directory (expected a file to write)", named(m.option, m.path)));
  if (exists && !S_ISREG(st.st_mode)) {
    m.in_place = true;
    m.fd = ::open(m.target.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);
    if (m.fd < 0) fail(m.option, m.path, errno);
  } else {
    refuse_an_input_read(m.option, m.path);
    const fs::path t(m.target);
    const fs::path dir = t.has_parent_path() ? t.parent_path() : fs::path(".");
    std::string tmpl = (dir / fmt::format(".{}.tptune-XXXXXX", t.filename().string())).string();
    m.fd = ::mkstemp(tmpl.data());
    if (m.fd < 0) fail(m.option, m.path, errno);
    m.temp = tmpl;
    // mkstemp makes the file 0600: give it the mode the target has, or the one a new file would get.
    const mode_t mode = exists ? (st.st_mode & 07777) : (0666 & ~current_umask());
    if (::fchmod(m.fd, mode) != 0) {
      const int e = errno;
      ::close(m.fd);
      m.fd = -1;
      ::unlink(m.temp.c_str());
      fail(m.option, m.path, e);
    }
  }
  m.buf = std::make_unique<FdBuf>(m.fd);
  m.os = std::make_unique<std::ostream>(m.buf.get());
}

OutputFile::~OutputFile() {
  Impl& m = *impl_;
  if (m.fd >= 0) ::close(m.fd);
  if (!m.temp.empty() && !m.renamed) ::unlink(m.temp.c_str());
}

std::ostream& OutputFile::stream() { return *impl_->os; }

void OutputFile::finish() {
  Impl& m = *impl_;
  if (m.finished) return;
  m.os->flush();
  int err = m.buf->error();
  if (err == 0 && !*m.os) err = EIO;
  const int fd = m.fd;
  m.fd = -1;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err != 0) fail(m.option, m.path, err);  // the destructor removes the temporary file
  m.finished = true;
}

void OutputFile::rename_into_place() {
  Impl& m = *impl_;
  finish();
  if (m.in_place || m.renamed) return;
  refuse_an_input_read(m.option, m.path);  // an input read while this output was written (the destructor cleans up)
  if (::rename(m.temp.c_str(), m.target.c_str()) != 0) fail(m.option, m.path, errno);
  m.renamed = true;
}

void OutputFile::commit() { rename_into_place(); }

void write_outputs(const std::vector<OutputText>& outputs) {
  std::vector<NamedPath> paths;
  for (const OutputText& o : outputs) paths.push_back({o.option, o.path});
  refuse_overwriting_inputs(paths, {});  // two outputs on one file: the second would replace the first
  std::vector<std::unique_ptr<OutputFile>> files;
  for (const OutputText& o : outputs) {
    files.push_back(std::make_unique<OutputFile>(o.option, o.path));
    files.back()->stream().write(o.content.data(), static_cast<std::streamsize>(o.content.size()));
    files.back()->finish();
  }
  for (auto& f : files) f->rename_into_place();
}

void write_output(std::string_view option, const std::string& path, std::string_view content) {
  OutputFile f{std::string(option), path};
  f.stream().write(content.data(), static_cast<std::streamsize>(content.size()));
  f.commit();
}

namespace {

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::equivalent(a, b, ec) && !ec) return true;
  // Neither need exist yet (two outputs): compare the paths with links and ".." resolved as far as they exist.
  const fs::path ca = fs::weakly_canonical(a, ec);
  if (ec) return false;
  const fs::path cb = fs::weakly_canonical(b, ec);
  return !ec && ca == cb;
}

// A path that names a file to compare: not "-" (standard output), not a device or FIFO (/dev/null may be every output).
bool is_file_path(const std::string& p) {
  if (p.empty() || p == "-") return false;
  std::error_code ec;
  const fs::file_status s = fs::status(p, ec);
  return !fs::exists(s) || fs::is_regular_file(s);
}

}  // namespace

void refuse_overwriting_inputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs) {
  for (size_t i = 0; i < outputs.size(); ++i) {
    const NamedPath& o = outputs[i];
    if (!is_file_path(o.path)) continue;
    for (const NamedPath& in : inputs)
      if (is_file_path(in.path) && same_file(o.path, in.path))
        throw Error(fmt::format("{}: is also the {} {}; refusing to overwrite an input (write to another path)",
                                named(o.option, o.path), in.option, yaml::shown(in.path, 200)));
    refuse_an_input_read(o.option, o.path);  // and every file read so far, whoever named it
    for (size_t k = 0; k < i; ++k)
      if (is_file_path(outputs[k].path) && same_file(o.path, outputs[k].path))
        throw Error(fmt::format("{}: is also the {} output (write each to its own path)", named(o.option, o.path),
                                outputs[k].option));
  }
}

void flush_stdout() {
  errno = 0;
  std::cout.flush();
  const bool cout_failed = !std::cout;
  const bool flush_failed = std::fflush(stdout) != 0;
  const int err = errno;
  if (cout_failed || flush_failed || std::ferror(stdout))
    throw Error(fmt::format("cannot write to standard output: {}", err != 0 ? std::strerror(err) : "a write failed"));
}

}  // namespace tptune
