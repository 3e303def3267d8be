#include "plans/program/bus_bandwidth.h"

namespace tptune {

double bus_factor(CollectiveKind k, int n) {
  if (n <= 1) return 0;
  switch (k) {
    case CollectiveKind::all_reduce:
      return 2.0 * (n - 1) / n;
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all:
      return static_cast<double>(n - 1) / n;
    case CollectiveKind::p2p:
      return 1.0;
  }
  return 1.0;
}

}  // namespace tptune
