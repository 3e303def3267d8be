#include "sim/search/candidate_results.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace tptune {

void CandidateResults::Part::add(size_t position, CandidateResult&& r) {
  if (is_static(r.pruned.reason)) return drop(position, r.pruned.reason);
  positions.push_back(position);
  results.push_back(std::move(r));
}

void CandidateResults::Part::drop(size_t position, PruneReason reason) {
  Dropped& d = dropped[reason];
  if (d.count == 0 || position < d.first) d.first = position;
  ++d.count;
}

CandidateResults::CandidateResults(std::vector<CandidateResult> all) : size_(all.size()), stored_(std::move(all)) {
  positions_.resize(size_);
  std::iota(positions_.begin(), positions_.end(), size_t{0});
}

CandidateResults CandidateResults::merge(size_t size, std::vector<Part>& parts, Rebuild rebuild) {
  CandidateResults out;
  out.size_ = size;
  out.rebuild_ = std::move(rebuild);
  size_t n = 0, holding = 0;
  for (const Part& p : parts) {
    n += p.results.size();
    holding += !p.results.empty();
  }
  // One part holds every stored result, in order (a search on one thread): taken whole, without moving each.
  for (Part& p : parts)
    if (holding == 1 && !p.results.empty() && std::is_sorted(p.positions.begin(), p.positions.end())) {
      out.positions_ = std::move(p.positions);
      out.stored_ = std::move(p.results);
      p.positions.clear();
      p.results.clear();
      n = 0;
    }
  // Each part's positions, then all of them sorted (a part is usually ascending already; the sort does not care).
  std::vector<std::pair<size_t, CandidateResult*>> order;
  order.reserve(n);
  for (Part& p : parts)
    for (size_t k = 0; k < p.results.size(); ++k) order.emplace_back(p.positions[k], &p.results[k]);
  std::sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  out.positions_.reserve(n);
  out.stored_.reserve(n);
  for (auto& [position, r] : order) {
    out.positions_.push_back(position);
    out.stored_.push_back(std::move(*r));
  }
  for (Part& p : parts) {
    for (const auto& [reason, d] : p.dropped) {
      Dropped& to = out.dropped_[reason];
      if (to.count == 0 || d.first < to.first) to.first = d.first;
      to.count += d.count;
    }
    p = Part{};
  }
  return out;
}

void CandidateResults::push_back(CandidateResult r) {
  positions_.push_back(size_++);
  stored_.push_back(std::move(r));
}

const CandidateResult* CandidateResults::find(size_t position) const {
  auto it = std::lower_bound(positions_.begin(), positions_.end(), position);
  if (it == positions_.end() || *it != position) return nullptr;
  return &stored_[static_cast<size_t>(it - positions_.begin())];
}

CandidateResult CandidateResults::operator[](size_t position) const {
  if (const CandidateResult* r = find(position)) return *r;
  return rebuild_(position);
}

CandidateResult CandidateResults::at(size_t position) const {
  if (position >= size_)
    throw std::out_of_range("CandidateResults::at: position " + std::to_string(position) + " of " +
                            std::to_string(size_));
  return (*this)[position];
}

bool CandidateResults::const_iterator::at_stored() const {
  return next_stored_ < owner_->positions_.size() && owner_->positions_[next_stored_] == position_;
}

const CandidateResult& CandidateResults::const_iterator::operator*() const {
  if (at_stored()) return owner_->stored_[next_stored_];
  if (!rebuilt_) rebuilt_ = owner_->rebuild_(position_);
  return *rebuilt_;
}

CandidateResults::const_iterator& CandidateResults::const_iterator::operator++() {
  if (at_stored()) ++next_stored_;
  ++position_;
  rebuilt_.reset();
  return *this;
}

}  // namespace tptune
