#include "sim/cost/comm_cost.h"

#include <algorithm>
#include <cmath>

#include "plans/util/enum_names.h"

namespace tptune {

int ring_steps(CollectiveKind k, int n) {
  if (n <= 1) return 0;
  if (k == CollectiveKind::all_reduce) return 2 * (n - 1);
  if (k == CollectiveKind::p2p) return 1;
  return n - 1;
}

// CommAlgorithm's enumerators, in declaration order.
constexpr std::string_view kCommAlgorithmNames[] = {"none", "ring",         "ring_ll", "nvls",
                                                    "tree", "hierarchical", "direct",  "measured"};
static_assert(std::size(kCommAlgorithmNames) == enum_count(CommAlgorithm::measured));

std::string_view to_string(CommAlgorithm a) { return name_of(kCommAlgorithmNames, a); }

namespace {

constexpr double kGB = 1e9;

struct Best {
  double time_us = 0;
  CommAlgorithm algorithm = CommAlgorithm::none;
  void offer(double t, CommAlgorithm a) {
    if (algorithm == CommAlgorithm::none || t < time_us) {
      time_us = t;
      algorithm = a;
    }
  }
};

// One collective among n GPUs of one node: ring Simple, ring LL, NVLS (all-reduce).
Best intra_node(CollectiveKind k, double bytes, int n, const ClusterSpec& cl, const CostParams& c) {
  Best b;
  if (n <= 1 || bytes <= 0) return b;
  const double factor = bus_factor(k, n), h = cl.intra_node.latency_us;
  const int steps = ring_steps(k, n);
  const double ring_bw = cl.intra_node.bandwidth_GBps * kGB * c.ring_busbw_efficiency.at(n);
  b.offer(c.simple_base_latency_us + steps * h + bytes * factor / ring_bw * 1e6, CommAlgorithm::ring);
  b.offer(c.ll_base_latency_us + steps * h * c.ll_hop_latency_ratio +
              bytes * factor / (ring_bw * c.ll_bandwidth_fraction) * 1e6,
          CommAlgorithm::ring_ll);
  if (k == CollectiveKind::all_reduce && cl.gpu.nvls) {
    const double nvls_bw = cl.intra_node.bandwidth_GBps * kGB * c.nvls_busbw_efficiency.at(n);
    b.offer(c.nvls_latency_us + bytes * factor / nvls_bw * 1e6, CommAlgorithm::nvls);
  }
  return b;
}

// One collective among m nodes, one GPU (one NIC) each: ring Simple / LL, and tree for all-reduce.
Best inter_node(CollectiveKind k, double bytes, int m, const ClusterSpec& cl, const CostParams& c) {
  Best b;
  if (m <= 1 || bytes <= 0) return b;
  const double factor = bus_factor(k, m), h = cl.inter_node.latency_us;
  const int steps = ring_steps(k, m);
  const double bw = cl.inter_node.bandwidth_GBps * kGB * c.network_busbw_efficiency;
  b.offer(c.simple_base_latency_us + steps * h + bytes * factor / bw * 1e6, CommAlgorithm::ring);
  b.offer(
      c.ll_base_latency_us + steps * h * c.ll_hop_latency_ratio + bytes * factor / (bw * c.ll_bandwidth_fraction) * 1e6,
      CommAlgorithm::ring_ll);
  if (k == CollectiveKind::all_reduce) {
    // Double binary tree: up and down the tree, 2 log2(m) hops; each rank sends and receives ~S each way (the
    // ring's 2(n-1)/n limit).
    const int hops = 2 * static_cast<int>(std::ceil(std::log2(static_cast<double>(m))));
    b.offer(c.simple_base_latency_us + hops * h + bytes * 2.0 / bw * 1e6, CommAlgorithm::tree);
  }
  return b;
}

}  // namespace

CommEstimate collective_cost(CollectiveKind kind, int64_t bytes_i, const GroupLayout& g, const ClusterSpec& cl,
                             const CostParams& c) {
  CommEstimate e;
  const double S = static_cast<double>(bytes_i);
  const int n = g.size;
  if (n <= 1 || S <= 0) return e;
  const MeasuredCollective* m = g.spans_nodes() ? nullptr : c.measured(kind, n);
  if (m) {
    e.time_us = m->time_us(kind, S) * c.collective_step_factor;
    e.algorithm = CommAlgorithm::measured;
  } else if (kind == CollectiveKind::p2p) {
    const LinkSpec& link = g.spans_nodes() ? cl.inter_node : cl.intra_node;
    double eff = c.p2p_bandwidth_efficiency * (g.spans_nodes() ? c.network_busbw_efficiency : 1.0);
    e.time_us = c.p2p_latency_us + S / (link.bandwidth_GBps * kGB * eff) * 1e6;
    e.algorithm = CommAlgorithm::direct;
  } else if (!g.spans_nodes()) {
    Best b = intra_node(kind, S, n, cl, c);
    if (kind == CollectiveKind::all_to_all) {
      // Every GPU sends (n-1)/n of its S/n buffer straight to its peers through the switch.
      double bw = cl.intra_node.bandwidth_GBps * kGB * c.ring_busbw_efficiency.at(n);
      b = Best{};
      b.offer(c.simple_base_latency_us + cl.intra_node.latency_us + S / n * bus_factor(kind, n) / bw * 1e6,
              CommAlgorithm::direct);
    }
    e.time_us = b.time_us;
    e.algorithm = b.algorithm;
  } else {
    const int p = g.per_node, m = g.nodes;
    double t = 0;
    switch (kind) {
      case CollectiveKind::all_reduce:
        t = intra_node(CollectiveKind::reduce_scatter, S, p, cl, c).time_us +
            inter_node(CollectiveKind::all_reduce, S / p, m, cl, c).time_us +
            intra_node(CollectiveKind::all_gather, S, p, cl, c).time_us;
        break;
      case CollectiveKind::all_gather:
        t = inter_node(CollectiveKind::all_gather, S / p, m, cl, c).time_us +
            intra_node(CollectiveKind::all_gather, S, p, cl, c).time_us;
        break;
      case CollectiveKind::reduce_scatter:
        t = intra_node(CollectiveKind::reduce_scatter, S, p, cl, c).time_us +
            inter_node(CollectiveKind::reduce_scatter, S / p, m, cl, c).time_us;
        break;
      case CollectiveKind::all_to_all: {
        double buf = S / n;
        double net = buf * (n - p) / n / (cl.inter_node.bandwidth_GBps * kGB * c.network_busbw_efficiency);
        double nvl =
            p > 1 ? buf * (p - 1) / n / (cl.intra_node.bandwidth_GBps * kGB * c.ring_busbw_efficiency.at(p)) : 0.0;
        t = c.simple_base_latency_us + cl.inter_node.latency_us + std::max(net, nvl) * 1e6;
        break;
      }
      case CollectiveKind::p2p:
        break;
    }
    e.time_us = t;
    e.algorithm = p == 1 && kind != CollectiveKind::all_to_all ? inter_node(kind, S, m, cl, c).algorithm
                                                               : CommAlgorithm::hierarchical;
  }
  if (e.time_us > 0) e.busbw_GBps = S * bus_factor(kind, n) / (e.time_us * 1e-6) / kGB;
  return e;
}

}  // namespace tptune
