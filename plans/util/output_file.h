#pragma once
// Writing the files a user asks for (plans, reports, traces, JSON, profiles, calibrations, baselines): whole or not
// at all, never over an input, and never silently short.
//
// Never over an input: every file the process has read through read_input_file (plans/util/input_file.h), however it
// was named (an argument, an option, a config's model.hf_config, a search.plans entry, a file of a folder), is refused
// as an output, through any spelling of its path or a hard or symbolic link, when the output is opened and again before
// it is renamed into place:
//
//   --json hf/config.json: is also the transformers config.json hf/config.json; refusing to overwrite an input (write
//   to another path)
//
// The check knows the files read so far, so a command reads every input before it writes its first output.
//
// Each file is written to a temporary file beside it (".NAME.tptune-XXXXXX" in the same folder, so the rename
// cannot cross file systems), every write and the close are checked, and only then is it renamed over the target. A
// failure (full disk, read-only folder, a parent that is a file) removes the temporary file, leaves what was at the
// path before untouched, and throws tptune::Error naming the option, the path and the system's reason:
//
//   --report out/r.html: cannot write: No space left on device
//
// A command with several outputs renders them all first and writes them with write_outputs(): every temporary file is
// written before the first rename, so a failure writing any of them replaces none. A target that exists and is not a
// regular file (/dev/null, /dev/stdout, a FIFO) is written in place: there is nothing to replace atomically. A symlink
// is followed: the file it points to is replaced, and the link stays.
//
// Standard output is checked too: flush_stdout() at the end of a command turns a failed write ("> /dev/full", a closed
// pipe) into "cannot write to standard output: REASON" instead of exit 0 with lost output.

#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace tptune {

// One file to write: the option that named it ("--report"; "" for none), its path and its whole content.
struct OutputText {
  std::string option;
  std::string path;
  std::string content;
};

// Writes every output as described above: all temporary files first, then the renames in order. Two outputs that name
// one file are refused as refuse_overwriting_inputs refuses them.
void write_outputs(const std::vector<OutputText>& outputs);
// One output.
void write_output(std::string_view option, const std::string& path, std::string_view content);

// An output streamed rather than rendered first (for documents too large to hold twice): write to stream(), then
// commit(). Destroyed without commit() (an exception on the way), it removes its temporary file.
class OutputFile {
 public:
  OutputFile(std::string option, std::string path);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  std::ostream& stream();
  // Checks every write, closes, renames over the target; tptune::Error as above.
  void commit();
  // Checks and closes without the rename (write_outputs renames each after all are written).
  void finish();
  void rename_into_place();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One path a command reads or writes, and the option (or argument) that named it, for refuse_overwriting_inputs.
struct NamedPath {
  std::string option;
  std::string path;
};

// Throws tptune::Error when an output names the same file as an input (also through another spelling of the path,
// a hard or symbolic link), as a file read so far (above), or as another output: "--out-plan C: is also the config C;
// refusing to overwrite an input (write to another path)". Outputs that are "-" (standard output) or empty are
// skipped. A command calls it once its inputs are read, to refuse before the work rather than after it.
void refuse_overwriting_inputs(const std::vector<NamedPath>& outputs, const std::vector<NamedPath>& inputs);

// Flushes standard output (C stdio and std::cout); tptune::Error "cannot write to standard output: REASON" when any
// write to it failed.
void flush_stdout();

}  // namespace tptune
