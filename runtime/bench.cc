#include "runtime/bench.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <set>
#include <tuple>

#include "plans/program/bus_bandwidth.h"
#include "plans/util/checked_math.h"
#include "plans/util/error.h"
#include "plans/util/version.h"
#include "runtime/bench_data.h"
#include "runtime/profiler.h"

namespace tptune {

using nlohmann::json;

json timing_json(const OpTiming& t) {
  return {{"median", t.median}, {"min", t.min}, {"p10", t.p10}, {"p90", t.p90}, {"max", t.max}};
}

OpTiming time_bench_calls(Backend& be, const BenchOptions& o, const std::function<void()>& fn) {
  Buffer one = be.alloc(1, Storage::f32), out = be.alloc(1, Storage::f32);
  auto timer = be.make_timer();
  std::vector<double> samples;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    be.all_reduce(Group::tp, ReduceOp::max, one.f32(), out.f32(), 1)->wait();
    timer->start();
    fn();
    timer->stop();
    float us = static_cast<float>(timer->elapsed_us());
    be.upload(one.f32(), &us, 1);
    be.all_reduce(Group::tp, ReduceOp::max, one.f32(), out.f32(), 1)->wait();
    be.download(&us, out.f32(), 1);
    if (it >= o.warmup) samples.push_back(us);
  }
  return summarize(samples);
}

CacheFlush::CacheFlush(Backend& be) {
  elements = kBytes / 2 / int64_t(sizeof(float));
  from = be.alloc(elements, Storage::f32);
  to = be.alloc(elements, Storage::f32);
}

OpTiming time_queued_calls(Backend& be, const BenchOptions& o, const CacheFlush& flush,
                           const std::function<void()>& fn) {
  for (int it = 0; it < o.warmup; ++it) fn();
  std::vector<std::unique_ptr<Timer>> timers;
  for (int it = 0; it < o.iters; ++it) timers.push_back(be.make_timer());
  be.synchronize();
  Buffer samples = be.alloc(o.iters, Storage::f32), slowest = be.alloc(o.iters, Storage::f32);
  be.all_reduce(Group::tp, ReduceOp::max, samples.f32(), slowest.f32(), 1)->wait();  // the ranks start together
  for (auto& timer : timers) {
    be.copy2d(flush.to.ptr(), flush.elements, flush.from.ptr(), flush.elements, 1, flush.elements);
    timer->start();
    fn();
    timer->stop();
  }
  std::vector<float> us;
  for (auto& timer : timers) us.push_back(static_cast<float>(timer->elapsed_us()));
  be.upload(samples.f32(), us.data(), o.iters);
  be.all_reduce(Group::tp, ReduceOp::max, samples.f32(), slowest.f32(), o.iters)->wait();
  be.download(us.data(), slowest.f32(), o.iters);
  return summarize(std::vector<double>(us.begin(), us.end()));
}

json bench_header(Backend& be, const char* what, const BenchOptions& o) {
  if (o.iters < 1) throw Error(fmt::format("--iters: expected at least 1, got {}", o.iters));
  if (o.warmup < 0) throw Error(fmt::format("--warmup: expected 0 or more, got {}", o.warmup));
  json j = json_header("tptune-bench", 1);
  j["bench"] = what;
  j["environment"] = environment_json(be);
  j["timing"] = {{"warmup", o.warmup}, {"iters", o.iters}, {"unit", "us"}, {"reduce_over_ranks", "max"}};
  return j;
}

namespace {

// Times `fn` as described in bench.h: sync, time one call, slowest rank.
template <class Fn>
OpTiming time_calls(Backend& be, const BenchOptions& o, Fn&& fn) {
  return time_bench_calls(be, o, std::function<void()>(std::forward<Fn>(fn)));
}

std::vector<int64_t> sizes(const BenchOptions& o) {
  if (o.min_bytes < 4 || o.max_bytes < o.min_bytes || o.max_bytes > (int64_t(1) << 34))
    throw Error(fmt::format("--min-bytes/--max-bytes: expected 4 <= min <= max <= 16 GiB, got {} and {}", o.min_bytes,
                            o.max_bytes));
  if (o.step_factor < 2) throw Error(fmt::format("--step-factor: expected 2 or more, got {}", o.step_factor));
  std::vector<int64_t> v;
  for (int64_t s = o.min_bytes; s <= o.max_bytes; s *= o.step_factor) v.push_back(s);
  return v;
}

}  // namespace

std::vector<GemmShape> program_gemm_shapes(const Program& p) {
  std::set<std::tuple<int64_t, int64_t, int64_t>> seen;
  std::vector<GemmShape> out;
  for (const auto& s : p.segments)
    for (const auto& op : s.ops)
      if (const auto* g = std::get_if<GemmOp>(&op.kind))
        if (g->m > 0 && g->n > 0 && g->k > 0 && seen.insert({g->m, g->n, g->k}).second)
          out.push_back({g->m, g->n, g->k, "program"});
  return out;
}

std::vector<GemmShape> grid_gemm_shapes() {
  std::vector<GemmShape> out;
  for (int64_t m : {16, 64, 256})
    for (int64_t n : {64, 256, 1024})
      for (int64_t k : {16, 64, 256, 1024}) out.push_back({m, n, k, "grid"});
  return out;
}

nlohmann::json bench_gemm(Backend& be, const std::vector<GemmShape>& shapes, const BenchOptions& o) {
  json j = bench_header(be, "gemm", o);
  json results = json::array();
  const DType ad = o.gemm_dtype, bd = ad == DType::fp8_e5m2 ? DType::fp8_e4m3 : ad,
              cd = ad == DType::fp32 ? DType::fp32 : DType::bf16;
  if (ad == DType::fp16) throw Error("bench gemm --dtype: fp32, bf16, fp8_e4m3 or fp8_e5m2");
  const bool trans_b = ad != DType::fp32;
  Buffer scale_a = be.alloc(1, Storage::f32), scale_b = be.alloc(1, Storage::f32);  // float8: amax-derived
  // One set of operands, sized for the largest shape, serves every shape (the sweep below runs them back to back).
  int64_t max_a = 1, max_b = 1, max_c = 1;
  for (const auto& s : shapes) {
    max_a = std::max(max_a, checked_mul(s.m, s.k, "bench gemm: m x k"));
    max_b = std::max(max_b, checked_mul(s.k, s.n, "bench gemm: k x n"));
    max_c = std::max(max_c, checked_mul(s.m, s.n, "bench gemm: m x n"));
  }
  Buffer a = be.alloc(max_a, be.storage_for(ad)), b = be.alloc(max_b, be.storage_for(bd)),
         c = be.alloc(max_c, be.storage_for(cd));
  // Operands like a training step's (runtime/bench_data.h): A an activation, B a weight; float8 operands cast from
  // their bf16 values with their amax-derived scales, as torchao's tensorwise recipe casts them.
  json operands = json::array();
  if (is_float8(ad)) {
    operands.push_back(
        fill_bench_float8_operand(be, a.ptr(), ad, max_a, kBenchSeed, "A", BenchValues::activation, scale_a.f32()));
    operands.push_back(
        fill_bench_float8_operand(be, b.ptr(), bd, max_b, kBenchSeed, "B", BenchValues::weight, scale_b.f32()));
  } else {
    operands.push_back(fill_bench_operand(be, a.ptr(), max_a, kBenchSeed, "A", BenchValues::activation));
    operands.push_back(fill_bench_operand(be, b.ptr(), max_b, kBenchSeed, "B", BenchValues::weight));
  }
  j["data"] = bench_data_json(kBenchSeed);
  j["data"]["operands"] = operands;
  auto args = [&](const GemmShape& s) {
    GemmArgs g;
    g.m = s.m;
    g.n = s.n;
    g.k = s.k;
    g.a = a.ptr();
    g.b = b.ptr();
    g.c = c.ptr();
    g.trans_b = trans_b;
    g.a_dtype = ad;
    g.b_dtype = bd;
    if (is_float8(ad)) g.scale_a = scale_a.f32(), g.scale_b = scale_b.f32();
    return g;
  };
  const size_t items = shapes.size() + 1;  // and the sweep
  for (const auto& s : shapes) {
    const GemmArgs g = args(s);
    OpTiming t = time_calls(be, o, [&] { be.gemm(g); });
    o.report(results.size() + 1, items, "GEMMs");
    results.push_back({{"m", s.m},
                       {"n", s.n},
                       {"k", s.k},
                       {"dtype", std::string(to_string(ad))},
                       {"b_dtype", std::string(to_string(bd))},
                       {"c_dtype", std::string(to_string(cd))},
                       {"trans_b", trans_b},
                       {"source", s.source},
                       {"time_us", timing_json(t)},
                       {"gflops", t.median > 0 ? 2.0 * s.m * s.n * s.k / t.median / 1e3 : 0.0}});
  }
  j["results"] = results;
  // The sweep: every shape once, back to back with no synchronization in between, so that ranks outnumbering the
  // cores take turns as they do in a step (a GEMM timed alone between barriers does not show it).
  OpTiming sweep = time_calls(be, o, [&] {
    for (const auto& s : shapes) be.gemm(args(s));
  });
  j["sweep"] = {{"gemms", shapes.size()}, {"time_us", timing_json(sweep)}};
  o.report(items, items, "GEMMs");
  return j;
}

nlohmann::json bench_collectives(Backend& be, const BenchOptions& o) {
  json j = bench_header(be, "collectives", o);
  const int n = be.group_size(Group::tp), r = be.group_rank(Group::tp);
  json results = json::array();
  const size_t items = o.collectives.size() * sizes(o).size();
  size_t done = 0;
  for (CollectiveKind kind : o.collectives) {
    if (n < 2) break;
    for (int64_t S : sizes(o)) {
      o.report(done++, items, "sizes");  // the sizes timed before this one
      const int64_t elems = S / 4;
      int64_t count = 0;  // nccl-tests' count column
      Buffer in, out;
      std::function<RequestPtr()> call;
      switch (kind) {
        case CollectiveKind::all_reduce:
          count = elems;
          in = be.alloc(count, Storage::f32);
          out = be.alloc(count, Storage::f32);
          call = [&] { return be.all_reduce(Group::tp, ReduceOp::sum, in.f32(), out.f32(), count); };
          break;
        case CollectiveKind::all_gather:
          count = elems / n;
          in = be.alloc(count, Storage::f32);
          out = be.alloc(count * n, Storage::f32);
          call = [&] { return be.all_gather(Group::tp, in.f32(), out.f32(), count); };
          break;
        case CollectiveKind::reduce_scatter:
          count = elems / n;
          in = be.alloc(count * n, Storage::f32);
          out = be.alloc(count, Storage::f32);
          call = [&] { return be.reduce_scatter(Group::tp, ReduceOp::sum, in.f32(), out.f32(), count); };
          break;
        case CollectiveKind::all_to_all:
          count = elems / n;
          in = be.alloc(count * n, Storage::f32);
          out = be.alloc(count * n, Storage::f32);
          call = [&] { return be.all_to_all(Group::tp, in.f32(), out.f32(), count); };
          break;
        case CollectiveKind::p2p:
          count = elems;
          in = be.alloc(count, Storage::f32);
          out = be.alloc(count, Storage::f32);
          call = [&] { return be.send_recv(Group::tp, in.f32(), (r + 1) % n, out.f32(), (r + n - 1) % n, count); };
          break;
      }
      if (count < 1) continue;  // smaller than one element per rank
      const int64_t bytes =
          kind == CollectiveKind::all_reduce || kind == CollectiveKind::p2p ? count * 4 : count * 4 * n;
      OpTiming t = time_calls(be, o, [&] { call()->wait(); });
      const double algbw = t.median > 0 ? static_cast<double>(bytes) / t.median / 1e3 : 0.0;  // GB/s
      results.push_back(
          {{"collective", std::string(to_string(kind))},
           {"ranks", n},
           {"bytes", bytes},
           {"count", count},
           {"type", "float"},
           {"redop", kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter ? "sum" : "none"},
           {"time_us", timing_json(t)},
           {"algbw_GBps", algbw},
           {"busbw_GBps", algbw * bus_factor(kind, n)}});
    }
  }
  j["results"] = results;
  return j;
}

nlohmann::json bench_memory(Backend& be, const BenchOptions& o) {
  json j = bench_header(be, "memory", o);
  json results = json::array();
  const std::vector<int64_t> all = sizes(o);
  for (size_t i = 0; i < all.size(); ++i) {
    o.report(i, all.size(), "sizes");  // the sizes timed before this one
    const int64_t elems = std::max<int64_t>(1, all[i] / 4);
    Buffer a = be.alloc(elems, Storage::f32), b = be.alloc(elems, Storage::f32), c = be.alloc(elems, Storage::f32);
    for (const char* kernel : {"copy", "add"}) {
      const bool add = std::string(kernel) == "add";
      OpTiming t = time_calls(be, o, [&] {
        if (add)
          be.add(elems, a.f32(), b.f32(), c.f32());
        else
          be.copy2d(c.f32(), elems, a.f32(), elems, 1, elems);
      });
      const int64_t bytes = elems * 4 * (add ? 3 : 2);  // read a (and b), write c
      results.push_back({{"kernel", kernel},
                         {"bytes", bytes},
                         {"elements", elems},
                         {"time_us", timing_json(t)},
                         {"GBps", t.median > 0 ? static_cast<double>(bytes) / t.median / 1e3 : 0.0}});
    }
  }
  j["results"] = results;
  return j;
}

std::string nccl_tests_table(const nlohmann::json& bench) {
  std::string out;
  std::string current;
  double bus_sum = 0;
  int rows = 0;
  auto footer = [&] {
    if (!current.empty())
      out += fmt::format("# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {:.4f} \n#\n",
                         rows ? bus_sum / rows : 0.0);
  };
  for (const auto& r : bench.at("results")) {
    const std::string kind = r.at("collective").get<std::string>();
    if (kind != current) {
      footer();
      current = kind;
      bus_sum = 0;
      rows = 0;
      out += fmt::format("# Collective test: {}_perf, {} ranks (one MPI process each)\n#\n", kind,
                         r.at("ranks").get<int>());
      out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>8}  {:>7}  {:>7}  {:>6}\n", "size", "count", "type",
                         "redop", "root", "time", "algbw", "busbw", "#wrong");
      out += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>8}  {:>7}  {:>7}  {:>6}\n", "(B)", "(elements)", "",
                         "", "", "(us)", "(GB/s)", "(GB/s)", "");
    }
    out += fmt::format("  {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>8.2f}  {:>7.2f}  {:>7.2f}  {:>6}\n",
                       r.at("bytes").get<int64_t>(), r.at("count").get<int64_t>(), r.at("type").get<std::string>(),
                       r.at("redop").get<std::string>(), -1, r.at("time_us").at("median").get<double>(),
                       r.at("algbw_GBps").get<double>(), r.at("busbw_GBps").get<double>(), "N/A");
    bus_sum += r.at("busbw_GBps").get<double>();
    ++rows;
  }
  footer();
  return out;
}

}  // namespace tptune
