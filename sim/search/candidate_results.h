#pragma once
// The results of a search's candidates, by position (SearchResult::results): every enumerated candidate in enumeration
// order, position == Candidate::index (the pp 1 candidates, then the pipeline ones), then the ac_layers sweep's kept
// ones.
//
// Memory grows with the candidates that pass the static rules, not with the space: a candidate a static rule prunes
// (is_static(), sim/search/prune_reason.h: decided by check_static() before anything is lowered) is counted by reason,
// with the position of its first, and not stored. Reading its position rebuilds its result (the search's Rebuild: its
// candidate decoded from the index, ResolvedSpace::candidate_at(), and check_static()'s verdict), equal field for field
// to what the search computed and dropped. So `results[i]` returns a copy, stored or rebuilt (`&results[i]` does not
// compile), iteration yields a stored result by reference and a dropped one rebuilt, and iterating every position of
// a large space costs a rebuild per pruned one: code that wants only the lowered candidates reads stored(). A space of
// 2^24 candidates of which 99.9 % are pruned first keeps ~17 k results, not 2^24 (bench/bench_search.cc's
// SearchPruned).

#include <cstddef>
#include <functional>
#include <iterator>
#include <map>
#include <optional>
#include <vector>

#include "sim/search/eval.h"
#include "sim/search/prune_reason.h"

namespace tptune {

class CandidateResults {
 public:
  // The result at a position that was not stored (a statically pruned candidate's).
  using Rebuild = std::function<CandidateResult(size_t position)>;
  // The statically pruned candidates of one reason: how many, and the first one's position.
  struct Dropped {
    size_t count = 0;
    size_t first = 0;
  };
  // What one worker of the search found, positions ascending or not: the results it keeps, and the counts of those it
  // dropped.
  struct Part {
    // Keeps `r`, unless a static rule pruned it (then counts it).
    void add(size_t position, CandidateResult&& r);
    // Counts a candidate a static rule pruned (`reason`: is_static()), without a result.
    void drop(size_t position, PruneReason reason);
    std::vector<size_t> positions;
    std::vector<CandidateResult> results;
    std::map<PruneReason, Dropped> dropped;
  };

  CandidateResults() = default;
  // Every result stored, at positions 0..all.size() - 1 (a caller that evaluated every candidate itself: the tests'
  // reference search).
  explicit CandidateResults(std::vector<CandidateResult> all);
  // Positions 0..size - 1 from the parts (each position in exactly one part; the parts are left empty); `rebuild`
  // gives the dropped ones.
  static CandidateResults merge(size_t size, std::vector<Part>& parts, Rebuild rebuild);
  // Stores `r` at position size().
  void push_back(CandidateResult r);

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // The result at `position` (< size()): a copy of the stored one, or rebuilt.
  CandidateResult operator[](size_t position) const;
  CandidateResult at(size_t position) const;  // std::out_of_range past the end
  // The stored result at `position`, or nullptr (dropped, or past the end). Feasible and lowered candidates are
  // always stored.
  const CandidateResult* find(size_t position) const;
  // The stored results, positions ascending, and their positions.
  const std::vector<CandidateResult>& stored() const { return stored_; }
  const std::vector<size_t>& stored_positions() const { return positions_; }
  // The dropped candidates by reason.
  const std::map<PruneReason, Dropped>& dropped() const { return dropped_; }

  // Every position in order. A stored result is yielded as a reference to it (valid as long as this object), a
  // dropped one as a reference to its rebuilt copy in the iterator (valid until the iterator moves on).
  class const_iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = CandidateResult;
    using difference_type = std::ptrdiff_t;
    using pointer = const CandidateResult*;
    using reference = const CandidateResult&;
    const_iterator() = default;
    const_iterator(const CandidateResults* owner, size_t position, size_t next_stored)
        : owner_(owner), position_(position), next_stored_(next_stored) {}
    const CandidateResult& operator*() const;
    const CandidateResult* operator->() const { return &**this; }
    const_iterator& operator++();
    bool operator==(const const_iterator& o) const { return position_ == o.position_; }
    bool operator!=(const const_iterator& o) const { return position_ != o.position_; }

   private:
    bool at_stored() const;
    const CandidateResults* owner_ = nullptr;
    size_t position_ = 0;
    size_t next_stored_ = 0;                          // the first stored result at or after position_
    mutable std::optional<CandidateResult> rebuilt_;  // the dropped result at position_, once read
  };
  const_iterator begin() const { return {this, 0, 0}; }
  const_iterator end() const { return {this, size_, stored_.size()}; }

 private:
  size_t size_ = 0;
  std::vector<size_t> positions_;        // ascending
  std::vector<CandidateResult> stored_;  // stored_[k] is at positions_[k]
  std::map<PruneReason, Dropped> dropped_;
  Rebuild rebuild_;
};

}  // namespace tptune
