// JSON a user hands us (plans/util/json_text.h): hostile documents are one-line errors with FILE:LINE, never a crash or
// nlohmann's own exception (issue 21, items 10 and 12).
#include "plans/util/json_text.h"

#include <catch2/catch.hpp>
#include <limits>
#include <string>

#include "../error_text.h"
#include "plans/model/hf_config.h"

using namespace tptune;
using nlohmann::json;
using tptune::test::error_of;

namespace {

// `levels` nested arrays around 0, on one line after `prefix` lines: "[[[...0...]]]".
std::string nested(size_t levels, const std::string& prefix = "") {
  return prefix + std::string(levels, '[') + "0" + std::string(levels, ']');
}

}  // namespace

TEST_CASE("JSON: nesting past the limit is refused while parsing, with its line", "[json]") {
  // 100k levels: building (and then dumping or copying) such a value recursed once per level and overflowed the
  // stack. The parse stops at level 65, so nothing deep is ever built.
  CHECK(error_of([] { parse_json_text(nested(100000, "\n\n"), "deep.json"); }) ==
        "deep.json:3: invalid JSON: nested deeper than 64 levels");
  // The limit itself is accepted, one more is not.
  CHECK(parse_json_text(nested(kMaxJsonDepth), "ok.json").dump().size() == 2 * kMaxJsonDepth + 1);
  CHECK(error_of([] { parse_json_text(nested(kMaxJsonDepth + 1), "x.json", "a tp-run profile"); }) ==
        "x.json:1: invalid JSON (expected a tp-run profile): nested deeper than 64 levels");
  // Objects count as levels too; brackets inside strings do not.
  std::string objects;
  for (int i = 0; i < 70; ++i) objects += "{\"a\":";
  objects += '1';  // appended piecewise: g++ 12 warns (-Wrestrict, a false positive) on "1" + std::string(...)
  objects.append(70, '}');
  CHECK(error_of([&] { parse_json_text(objects, "o.json"); }) ==
        "o.json:1: invalid JSON: nested deeper than 64 levels");
  CHECK(parse_json_text("{\"s\": \"" + std::string(1000, '[') + "\"}", "s.json")["s"].get<std::string>().size() ==
        1000);
}

TEST_CASE("JSON: a number past the double range is a parse error with its line", "[json]") {
  // nlohmann reports 1e400 as out_of_range.406, which is not a parse_error: it escaped as an "internal error".
  CHECK(error_of([] { parse_json_text("{\n  \"hidden_size\": 1e400\n}", "big.json"); }) ==
        "big.json:2: invalid JSON: number overflow parsing '1e400' (a number past the range of a double, about "
        "1.8e308)");
  CHECK(error_of([] { parse_json_text("[-1e309]", "neg.json"); })
            .starts_with("neg.json:1: invalid JSON: number "
                         "overflow parsing '-1e309'"));
  // Underflow is a number (0), and the largest double reads.
  CHECK(parse_json_text("1e-400", "tiny.json").get<double>() == 0.0);
  CHECK(parse_json_text("1.7976931348623157e308", "max.json").get<double>() > 1e308);
}

TEST_CASE("JSON: syntax errors and strings that are not UTF-8 keep their line", "[json]") {
  CHECK(error_of([] {
          parse_json_text("{\n\"a\": 1,,\n}", "s.json");
        }).starts_with("s.json:2: invalid JSON: syntax error while parsing object key"));
  CHECK(error_of([] {
          parse_json_text("{\n\"name\": \"caf\xe9\"\n}", "u.json");
        }).starts_with("u.json:2: invalid JSON: syntax error while parsing value - invalid string: ill-formed UTF-8"));
}

TEST_CASE("JSON: a key stated twice in one object is refused with both lines", "[json]") {
  // Issue 37, class 11: nlohmann keeps the last of two equal keys, so a config.json with hidden_size 4096 and then
  // 8192 read as 8192 without a word, where the YAML readers refuse a duplicate key.
  CHECK(error_of([] {
          parse_json_text("{\n  \"hidden_size\": 4096,\n  \"n\": 1,\n  \"hidden_size\": 8192\n}", "c.json");
        }) ==
        "c.json:4: invalid JSON: duplicate key \"hidden_size\" (first on line 2): a key is stated once per object");
  // At any depth, with the caller's expectation; a key string containing ':' and quotes does not shift the count, nor
  // does a string value followed by ':' inside a string.
  CHECK(error_of([] {
          parse_json_text(R"({"a\":": "x:", "ops": [{"name": "n", "time_us": {"median": 1, "median": 2}}]})", "p.json",
                          "a tp-run profile");
        }) ==
        "p.json:1: invalid JSON (expected a tp-run profile): duplicate key \"median\" (first on line 1): a key is "
        "stated once per object");
  // The same key in two objects, or in an object inside the first, is no duplicate.
  const json ok = parse_json_text(R"({"a": {"a": 1}, "b": [{"a": 2}, {"a": 3}], "c": {"a": 4}})", "ok.json");
  CHECK(ok["b"][1]["a"] == 3);
  CHECK(error_of([] { parse_hf_config("{\"hidden_size\": 4096,\n\"hidden_size\": 8192}", "c.json"); }) ==
        "c.json:2: invalid JSON: duplicate key \"hidden_size\" (first on line 1): a key is stated once per object");
}

TEST_CASE("JSON: the HF config reader passes every case on as one line", "[json]") {
  CHECK(error_of([] { parse_hf_config(nested(100000), "c.json"); }) ==
        "c.json:1: invalid JSON: nested deeper than 64 levels");
  CHECK(error_of([] {
          parse_hf_config("{\"hidden_size\": 1e400}", "c.json");
        }).starts_with("c.json:1: invalid JSON: number overflow parsing '1e400'"));
}

TEST_CASE("json_dump: a string that is not UTF-8 is written, not thrown on", "[json]") {
  // A model name from a YAML file (yaml-cpp does not check UTF-8) reached report_json's dump(): type_error 316.
  json j = {{"model", std::string("caf\xe9")}};
  CHECK_THROWS(j.dump());
  CHECK(json_dump(j) == "{\"model\":\"caf\xef\xbf\xbd\"}");  // U+FFFD, the replacement character
  CHECK(json_dump(json{{"a", 1}}, 2) == "{\n  \"a\": 1\n}");
}

TEST_CASE("JsonDoc: wrong types and ranges name the file and the key", "[json]") {
  const JsonDoc doc("p.json");
  const json j = parse_json_text(
      R"({"format": 3, "version": 4294967297, "environment": {"ranks": 4294967297, "cores": -1}, "big": 18446744073709551615,
          "ok": 7, "x": 1.5, "inf": "a", "list": [1], "flag": "yes", "name": "n"})",
      "p.json");
  CHECK(error_of([&] { doc.string(j, "", "format"); }) == "p.json: format: expected a string, got 3");
  // 2^32 + 1: read as an int it is 1. Checked as the 64-bit value it is, it is out of range.
  CHECK(error_of([&] {
          doc.integer(j, "", "version", {1, 1});
        }) == "p.json: version: expected an integer in 1..1, got 4294967297");
  CHECK(error_of([&] { doc.integer(j["environment"], "environment", "ranks", limits::world_size); }) ==
        "p.json: environment.ranks: expected an integer in 1..1048576, got 4294967297");
  CHECK(error_of([&] {
          doc.integer(j["environment"], "environment", "cores", {0, 1024});
        }) == "p.json: environment.cores: expected an integer in 0..1024, got -1");
  // 2^64 - 1 is a valid JSON unsigned: never wrapped to -1 by a signed read.
  CHECK(error_of([&] {
          doc.integer(j, "", "big", {-5, 5});
        }) == "p.json: big: expected an integer in -5..5, got 18446744073709551615");
  // Without an upper bound, a value past INT64_MAX is told the range (issue 37, class 17: a p2p's 2^64 - 1 bytes were
  // "expected a non-negative integer"); a negative one the lower bound.
  CHECK(error_of([&] {
          doc.integer(j, "", "big", {0, std::numeric_limits<int64_t>::max()});
        }) == "p.json: big: expected an integer in 0..9223372036854775807, got 18446744073709551615");
  CHECK(error_of([&] {
          doc.integer(j["environment"], "environment", "cores", {0, std::numeric_limits<int64_t>::max()});
        }) == "p.json: environment.cores: expected a non-negative integer, got -1");
  CHECK(doc.integer(j, "", "ok", {1, 10}) == 7);
  CHECK(error_of([&] { doc.integer(j, "", "x", {0, 10}); }) == "p.json: x: expected an integer in 0..10, got 1.5");
  CHECK(doc.number(j, "", "x", {0, 2, true}) == 1.5);
  CHECK(error_of([&] {
          doc.number(j, "", "inf", {0, 2, true});
        }) == "p.json: inf: expected a number in (0, 2], got \"a\"");
  CHECK(error_of([&] { doc.member(j["environment"], "environment", "backend"); }) ==
        "p.json: environment.backend: missing");
  CHECK(error_of([&] { doc.boolean(j, "", "flag"); }) == "p.json: flag: expected true or false, got \"yes\"");
  CHECK(error_of([&] { doc.object(j, "", "list"); }) == "p.json: list: expected an object, got [1]");
  CHECK(error_of([&] { doc.member(j["list"], "list", "a"); }) == "p.json: list: expected an object, got [1]");
  CHECK(doc.find(j, "", "absent") == nullptr);
  CHECK(doc.string(j, "", "name") == "n");
  // A long value is cut, so that the error stays one short line.
  const json long_value = std::string(500, 'x');
  CHECK(error_of([&] {
          doc.integer_value(long_value, "k", {0, 1});
        }) == "p.json: k: expected an integer in 0..1, got \"" + std::string(39, 'x') + "...");
}
