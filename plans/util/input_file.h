#pragma once
// Reading a file a user hands us: every config, plan, calibration, HF config.json, profile, bench file and baseline
// is read through read_input_file, so that no input can hang, exhaust memory or be misread as text it is not.
//
// A path is refused, in one line naming it, when it is
//   - missing:               "x.yaml: no such file (expected a config YAML file)"
//   - a directory:           "dir: is a directory (expected a config YAML file)"
//   - not a regular file:    "/dev/zero: not a regular file (a character device; expected a config YAML file)"
//     (devices, FIFOs and sockets can be endless or block forever; it is opened without blocking to find out)
//   - larger than its bound: "big.json: larger than 64 MiB, the most a tp-run profile JSON file may have"
//     (checked on the size the file reports and again while reading, so a file that grows is still bounded)
//   - empty:                 "x.yaml: empty file (expected a config YAML file)"
//   - not UTF-8 text:        "x.yaml:3: invalid UTF-8 (byte 0xff); expected a config YAML file in UTF-8"
//     (YAML and JSON are UTF-8; a byte that is not would otherwise reach a JSON output and break it there)
//   - unreadable:            "x.yaml: cannot read: Permission denied"
//
// The bounds are far above any real file: a config or plan is a few KB, a transformers config.json under 10 KB, a
// check baseline some KB; a tp-run profile has one record per op of one transformer block (a few hundred records, under
// 1 MiB). Parsing holds several times a file's size in memory, so the bound is also the memory an input can take.
//
// Every file read_input_file opens is also remembered for the rest of the process (its device and inode, and its path
// with links and ".." resolved), whoever named it: an argument, an option, a config's model.hf_config, a search.plans
// entry, a file of a folder. plans/util/output_file.h refuses to write over any of them, so that no output of a run can
// replace a file the run read, however the two paths are spelled.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tptune {

// Hand-written inputs: config, plan, GPU spec and calibration YAML, transformers config.json, check baselines.
inline constexpr size_t kMaxTextInputBytes = size_t{16} << 20;  // 16 MiB
// Measured data: tp-run profile and bench JSON (--measured, calibrate, accuracy).
inline constexpr size_t kMaxDataInputBytes = size_t{64} << 20;  // 64 MiB

// The whole file at `path`, a `what` ("config YAML", "tp-run profile JSON") of at most `max_bytes`; the errors above
// are tptune::Error.
std::string read_input_file(const std::string& path, std::string_view what, size_t max_bytes = kMaxTextInputBytes);

// The first byte of `text` that is not part of well-formed UTF-8 (overlong forms, surrogates and code points past
// U+10FFFF are not), or std::string_view::npos when it is all UTF-8.
size_t first_invalid_utf8(std::string_view text);

// A file this process has read through read_input_file: the path as it was given, and what it was read as.
struct InputRead {
  std::string path;
  std::string what;  // "config YAML", "transformers config.json", ...
};

// The input this process has read that `path` names (the same device and inode, through any hard or symbolic link, or
// the same resolved path), if any.
std::optional<InputRead> input_read_at(const std::string& path);

// Forgets every input read so far. For tests, where one process runs many commands; a tool never calls it.
void forget_inputs_read();

// "64 MiB", "16 MiB", "512 KiB", "100 bytes": a bound as errors state it.
std::string size_text(size_t bytes);

}  // namespace tptune
