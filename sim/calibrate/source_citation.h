#pragma once
// The `source:` map that opens every file of the two public records, the kernel record (profiles/kernels,
// sim/calibrate/kernel_record.h) and the run record (profiles/published, sim/calibrate/published_record.h): who
// published the figures and where they stand. One reader for both, so that the two records check a citation alike.
//
//   source: {id, citation, repository + path + commit | paper, <the record's own keys>, measurement}
//
// Checks (tptune::Error, one line "<file>:<line>: source.<key>: ..."): every key known; id and citation present;
// either a repository (with path and a commit of 40 hex digits) or a paper.

#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

namespace YAML {
class Node;
}

namespace tptune {

namespace yaml {
class YamlDoc;
}

struct SourceCitation {
  std::string file;  // the path it was read from
  std::string id, citation, repository, path, commit, paper, measurement;
};

// Reads `root`'s `source:` into `s` (`file`: the doc's). `extra`: the record's own optional string keys and where each
// goes, read after `paper` and before `measurement`; `no_place`: the error when neither a repository nor a paper is
// named.
void read_source_citation(const yaml::YamlDoc& doc, const YAML::Node& root, SourceCitation& s,
                          std::initializer_list<std::pair<const char*, std::string*>> extra, const char* no_place);

// `root`'s list `key` ("runs"), present and not empty: each item given to `read` with its key ("runs[3]"), which
// reads it, keeps it and returns its id. Throws tptune::Error at an item whose id an earlier one has ("'x' is also
// runs[0]'s id; run ids are unique in a file": `item` names one).
void read_record_list(const yaml::YamlDoc& doc, const YAML::Node& root, const char* key, const char* item,
                      const std::function<std::string(const YAML::Node& node, const std::string& key)>& read);

// A record's folder: every *.yaml of `dir`, sorted by file name (yaml_files_of(), `folder` and `holds` naming it in
// its errors), each file's text (read as `record`) given to `read`, which parses it, keeps the result and returns its
// source id. Throws tptune::Error at the file's source.id when another file of the folder has that id.
void read_record_folder(const std::string& dir, std::string_view folder, std::string_view holds, const char* record,
                        const std::function<std::string(const std::string& text, const std::string& file)>& read);

}  // namespace tptune
