// Reading the files a user hands us (plans/util/input_file.h): what is not a bounded regular UTF-8 file is one line
// naming it, and nothing blocks or reads without end (issue 21, items 11 and 12).
#include "plans/util/input_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "../error_text.h"
#include "../temp_dir.h"
#include "plans/language/config.h"
#include "plans/util/yaml_util.h"

using namespace tptune;
using tptune::test::error_of;
using tptune::test::TempDir;

TEST_CASE("input files: a regular file is read whole", "[input_file]") {
  TempDir d;
  const std::string p = d.file("a.yaml", "model:\n  preset: tiny-llama\n");
  CHECK(read_input_file(p, "config YAML") == "model:\n  preset: tiny-llama\n");
  // A file of exactly the bound is read; one byte more is refused (the bound counts bytes).
  const std::string at = d.file("at.txt", std::string(1024, 'x'));
  CHECK(read_input_file(at, "test", 1024).size() == 1024);
  const std::string past = d.file("past.txt", std::string(1025, 'x'));
  CHECK(error_of([&] { read_input_file(past, "test", 1024); }) ==
        past + ": larger than 1 KiB, the most a test file may have");
}

TEST_CASE("input files: an empty file says so (not 'cannot read')", "[input_file]") {
  TempDir d;
  const std::string p = d.file("empty.yaml", "");
  CHECK(error_of([&] { read_input_file(p, "config YAML"); }) == p + ": empty file (expected a config YAML file)");
  // Through the config loader, as `tp-plan simulate empty.yaml` reads it.
  CHECK(error_of([&] { load_config(p); }) == p + ": empty file (expected a config YAML file)");
}

TEST_CASE("input files: missing, a directory, a device, a FIFO", "[input_file]") {
  TempDir d;
  CHECK(error_of([&] { read_input_file("no/such.yaml", "config YAML"); }) ==
        "no/such.yaml: no such file (expected a config YAML file)");
  CHECK(error_of([&] { read_input_file(d.path.string(), "plan YAML"); }) ==
        d.path.string() + ": is a directory (expected a plan YAML file)");
  // /dev/zero never ends: it is refused before a byte is read, not read until memory runs out. The message says so:
  // a reader that read it would stop at the size bound and say "larger than 16 MiB" instead.
  CHECK(error_of([&] { read_input_file("/dev/zero", "config YAML"); }) ==
        "/dev/zero: not a regular file (a character device; expected a config YAML file)");
  // A FIFO without a writer: opening it for reading would block forever without O_NONBLOCK.
  const std::string fifo = (d.path / "pipe").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(error_of([&] { read_input_file(fifo, "tp-run profile JSON"); }) ==
        fifo + ": not a regular file (a FIFO; expected a tp-run profile JSON file)");
}

TEST_CASE("input files: bytes that are not UTF-8 are refused with their line", "[input_file]") {
  TempDir d;
  // Line 3 holds a Latin-1 "e acute" (0xe9), which is not UTF-8.
  const std::string p = d.file("latin1.yaml", "model:\n  preset: tiny-llama\n  name: caf\xe9\n");
  CHECK(error_of([&] { read_input_file(p, "config YAML"); }) ==
        p + ":3: invalid UTF-8 (byte 0xe9); expected a config YAML file in UTF-8");
  // The same text in UTF-8 (c3 a9) reads.
  const std::string ok = d.file("utf8.yaml", "name: caf\xc3\xa9\n");
  CHECK(read_input_file(ok, "config YAML") == "name: caf\xc3\xa9\n");
}

TEST_CASE("first_invalid_utf8: the byte where UTF-8 breaks", "[input_file]") {
  CHECK(first_invalid_utf8("plain ascii") == std::string_view::npos);
  CHECK(first_invalid_utf8("\xe2\x82\xac euro, \xf0\x9f\x98\x80 emoji") == std::string_view::npos);
  CHECK(first_invalid_utf8("ab\xff") == 2);                                          // never a UTF-8 byte
  CHECK(first_invalid_utf8("a\xc0\xaf") == 1);                                       // overlong '/'
  CHECK(first_invalid_utf8("a\xe0\x80\xaf") == 1);                                   // overlong, 3 bytes
  CHECK(first_invalid_utf8("a\xed\xa0\x80") == 1);                                   // a UTF-16 surrogate (U+D800)
  CHECK(first_invalid_utf8("a\xf4\x90\x80\x80") == 1);                               // past U+10FFFF
  CHECK(first_invalid_utf8("abc\xe2\x82") == 3);                                     // cut short at the end
  CHECK(first_invalid_utf8(std::string_view("a\0b", 3)) == std::string_view::npos);  // NUL is UTF-8
}

TEST_CASE("size_text: bounds as errors state them", "[input_file]") {
  CHECK(size_text(kMaxDataInputBytes) == "64 MiB");
  CHECK(size_text(kMaxTextInputBytes) == "16 MiB");
  CHECK(size_text(1536) == "1536 bytes");  // 1.5 KiB: not a whole KiB
  CHECK(size_text(2048) == "2 KiB");
}
