#include "runtime/gather.h"

#include <fmt/format.h>

#include "plans/util/error.h"
#include "runtime/executor.h"

namespace tptune {

std::vector<float> gather_group(Backend& be, Group g, const std::vector<float>& local, const std::string& what) {
  const int size = be.group_size(g);
  const int64_t n = static_cast<int64_t>(local.size());
  Buffer in = be.alloc(n, Storage::f32), out = be.alloc(n * size, Storage::f32);
  be.upload(in.f32(), local.data(), n);
  try {
    be.all_gather(g, in.f32(), out.f32(), n)->wait();
  } catch (const Error& e) {  // a watchdog timeout: say which tensor was being gathered
    throw Error(fmt::format("gathering {} from every rank: {}", what, e.what()));
  }
  std::vector<float> all(static_cast<size_t>(n * size));
  be.download(all.data(), out.f32(), n * size);
  return all;
}

std::vector<float> gather_all(Backend& be, const Executor& ex, int t) {
  return gather_group(be, Group::tp, ex.read(t), ex.flat().tensors[size_t(t)].fqn);
}

std::vector<float> assemble(const std::vector<float>& shards, const Shape& full, int dim, int tp) {
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < dim; ++i) outer *= full[size_t(i)];
  for (size_t i = size_t(dim) + 1; i < full.size(); ++i) inner *= full[i];
  const int64_t w = full[size_t(dim)] / tp * inner, local = outer * w;
  std::vector<float> out(shards.size());
  for (int r = 0; r < tp; ++r)
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < w; ++i) out[size_t(o * w * tp + r * w + i)] = shards[size_t(r * local + o * w + i)];
  return out;
}

}  // namespace tptune
