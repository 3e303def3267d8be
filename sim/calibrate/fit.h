#pragma once
// The calibration fit: cost-model parameters from measured op times, by Eigen least squares with bounds.
//
//   std::vector<Measurements> ms = ...;                       // sim/calibrate/measurements.h
//   Calibration cal = fit_calibration(ms, gpu_preset("cpu"), {});
//
// The model's form is kept; its coefficients are fitted. Each op class is one linear problem in the model's own
// terms: x_i is the op's time under the model with the fitted efficiency set to 1 and the fitted overhead to 0
// (computed by the simulator's cost functions themselves), t_i the measured median, and
//   gemm          t = x(k0) / eff + overhead                   eff per dtype class (one class when GEMMs run in
//                                                              fp32 whatever their dtype: the CPU backend), k0 =
//                                                              gemm_k_overhead by a search over 0..4096 (log grid);
//                                                              bench GEMMs get a level of their own when profiles
//                                                              are there (hot caches), sharing k0 and overhead
//   attention     t = x_fwd / eff_fwd + x_bwd / eff_bwd + n_scores x (ns_fwd | ns_bwd) + overhead
//                                                              (the per-score terms only when the samples span two
//                                                              head dims or more; else the device's values stay)
//   memory-bound  t = (x_plain + f_norm x_norm + f_rope x_rope + f_act x_act + f_loss x_loss + f_cast x_cast
//                      + f_adam x_adam + x_emb_bwd / e_emb) / eff   (copy/add benches: a level of their own, which
//                                                              anchors eff only without profiles)
//                     + overhead (+ optimizer_overhead for AdamW instead)
//   collective    t = alpha + S x bus_factor(kind, n) / busbw   per (kind, group size n), from >= 2 sizes; the curve
//                                                              also keeps the median time at each measured size
//                                                              (MeasuredCollective::points: interpolated between them,
//                                                              the line beyond the largest); from the collectives
//                                                              bench where it measured >= 2 sizes (else from the
//                                                              profiles); then a profile's collective (a step's,
//                                                              colder buffers) t = factor x curve(S): one
//                                                              collective_step_factor, the median ratio
// Before these, concurrent_rank_rate (CostParams) from the GEMMs of the profiles: the median of measured / modelled
// time of single-rank runs over that of multi-rank runs (>= 5 GEMM samples of each; else the device's value stays),
// so that the per-class fits below see each run at the rate its ranks had. Then oversubscribed_efficiency from the
// sweep (runtime/bench.h) of a gemm bench at more ranks than cores against the same shapes' sweep at no more; the
// per-op rows of such a bench (GEMMs and copies timed alone while ranks take turns) are not fitted.
// Rows are weighted by 1/t_i (relative error, so that small and large ops count alike). Robust to stalls of a
// shared machine: after one solve, rows whose relative residual exceeds max(50%, 4 x the median) are dropped and
// the rest solved again (the residuals reported still cover every sample). Bounds: efficiencies in
// (1e-4, 4], traffic factors [0.01, 100], overheads and alpha in [0, 1e4] us, busbw in [1e-4, 1e4] GB/s; a
// coefficient that leaves its bound is fixed at the bound and the rest re-solved (active set). The residuals are
// then recomputed with the full model (max with the memory-bound branch included): median and max relative error
// per class. Classes without samples leave their parameters at the defaults.

#include <optional>
#include <string>
#include <vector>

#include "sim/calibrate/calibration.h"
#include "sim/calibrate/measurements.h"
#include "sim/cluster_spec.h"
#include "sim/cost/cost_params.h"
#include "sim/timeline/timeline.h"

namespace tptune {

struct FitOptions {
  // One GEMM efficiency for every dtype (the device computes them all alike). Default: when the environment's
  // backend is cpu (runtime/backend.h: every float tensor is stored and computed in fp32).
  std::optional<bool> tie_gemm_dtypes;
  // `tp-plan calibrate --fit NAME,...`: when not empty, only these parameters are fitted; every other coefficient of
  // their classes is held at the device's value in the solve (not merely left out of the file), and the classes
  // with none of them named (memory-bound, collectives, the rank-sharing terms) are not fitted at all. Only the
  // parameters that fit_gemm and fit_attention solve for one by one may be named (kOnlyFittable); anything else is a
  // one-line tptune::Error "--fit NAME: ...".
  std::vector<std::string> only;
};

// The parameters FitOptions::only may name.
extern const char* const kOnlyFittable[10];

// `device` is the spec the fit is relative to; the defaults are device_cost_params(device).
Calibration fit_calibration(const std::vector<Measurements>& ms, const GpuSpec& device, const FitOptions& options);

// The cluster a measurement ran on: one node of `ranks` devices, with the environment's "cores" as cores_per_node when
// fewer than the ranks (CPU ranks oversubscribed). Its rates are the device's: sim/shared_machine.h applies
// concurrent_rank_rate and the turns.
ClusterSpec measurement_cluster(const GpuSpec& device, const Measurements& m);
// The model's op durations for a measured run (cost_ops(), sim/shared_machine.h). An `overlapped` step pays the
// turns of oversubscribed ranks; an op timed alone (`serialized`, the profile's per-op times) does not: it runs in one
// scheduler slice, and the turns the other ranks take land in the next collective's wait (measured here: per-op GEMM
// times at tp 4 on 2 cores at the tp-2 rate). Collectives are what they measured (the collectives bench ran with
// the same ranks taking turns). Measured on the held-out tp 4 steps of 4 ranks on 2 cores: slowing only the FLOP and
// byte rates instead of whole ops left them ~10% under their walls (the GEMM overheads and attention's per-score
// terms are ~10% of such a step).
enum class Timing { overlapped, serialized };
OpCosts measured_run_costs(const Program& p, const GpuSpec& device, const Measurements& m, const CostParams& c,
                           Timing timing);
// The model's time for one measured op.
double model_time_us(const MeasuredOp& o, const Measurements& m, const ClusterSpec& cl, const CostParams& c);

// A printable table of the fit: per class the fitted values against the defaults, residuals and sample counts,
// then the parameters the data did not touch.
std::string fit_report(const Calibration& cal, const GpuSpec& device);

// Bounded linear least squares (exposed for tests): min |A x - b| with lo <= x <= hi, by an active set.
std::vector<double> bounded_least_squares(const std::vector<std::vector<double>>& rows, const std::vector<double>& b,
                                          const std::vector<double>& lo, const std::vector<double>& hi);

}  // namespace tptune
