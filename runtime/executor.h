#pragma once
// The executor: runs one training step of a Program on a Backend, as one TP rank.
//
// It expands the Program (every layer instantiated, plans/program/program.h), gives every flat tensor one device buffer
// (int32 for the tokens and targets, otherwise the backend's storage for the tensor's dtype: Backend::storage_for),
// keeps an fp32 master copy of every parameter whose storage is not fp32 (AdamW updates the master and converts it
// into the parameter's storage, as mixed-precision training does), fills parameters and inputs from a seed
// (runtime/tensor_init.h: every rank builds the same full tensors and keeps its shard), and runs the flat ops in order:
// the forward of every op, the loss, the backward and the gradients, then — unless told to skip it — the optimizer.
//
// It honours the plan exactly: the collectives it issues are the Program's collectives, nothing else. Collectives
// are non-blocking; the executor waits for one only when a later op reads its output, or writes its input or
// output (for async TP ring steps this is tracked per sequence slot, so that the p2p of step j+1 is in flight
// while the gemm of step j runs). Tensor-dim layouts are rearranged around the rank-major backend calls here:
//   all_gather(gather_dim d)       local (.., n_d, ..) -> (.., tp*n_d, ..), rank i's slice at i along d
//   reduce_scatter(scatter_dim d)  local (.., n_d, ..) -> (.., n_d/tp, ..), slice r of the sum
//   all_to_all(gather g, scatter s) split along s, send slice j to rank j, concatenate what arrives along g
//   slice(dim d)                    this rank's slice of d (R -> S(d), no communication)
// Per-op parameters the IR leaves implicit come from the tensors: the rank's vocab offset (vocab-sharded embedding
// and cross-entropy: rank * vocab_local), the rope position offset (rank * local seq when the input is S(1)),
// norm eps and rope theta from the Model.
//
// Pipeline stage Programs (plans/lower/rewrite/pipeline_stage.h) transfer on the backend's pipeline group: a pp.recv_*
// op receives from its peer's pp rank, a pp.send_* op sends there, one way each, tagged by (sending stage, microbatch,
// activation or gradient) so that every transfer meets its own. A send is never waited for where it is issued, nor at
// the end of run_ops(): it completes when a later op would overwrite what it sends, or at wait_transfers() (torch's
// PipelineStage likewise leaves its sends in flight and waits for them later), so that two ranks that send to each
// other before receiving cannot deadlock whatever MPI's protocol for the message size.
//
// Context parallelism (Program::cp > 1, plans/language/context_parallel.h) on the backend's CP group: the tokens and
// targets are this cp rank's rows of the seeded full batch (runtime/ring/cp_layout.h: head and tail chunks under load
// balancing, else one contiguous run), rope uses those rows' global positions, and the ring ops run as the rank's steps
// of torch's ring attention (runtime/ring/schedule.h picks each block's rows; the blocks are the backend's
// attention_block_* calls, the K/V rotation the Program's all-gather or p2p ops on the CP group, p2p meaning "send
// to cp rank + 1, receive from cp rank - 1"). FSDP's collectives (Group::dp, shard group dp_shard x cp) keep every
// parameter whole on every rank: the all-gather has nothing to do (parameters are replicated from the seed), and the
// gradient reduce-scatter runs as an all-reduce (sum) of the gradients, whose result holds every rank's shard.
//
// Mixture of experts (plans/lower/experts.cc; executor_moe.cc): the router, its top-k and the dispatcher's permutations
// run as host code on the downloaded tensors, the grouped GEMMs as one Backend gemm per local expert over the rows the
// routing gave it. Routing is data-dependent: the Program's shapes of the received and expert-ordered rows are the
// balanced estimate, so the executor sizes those buffers for the most a rank can receive (ep x its own routed copies),
// zero beyond the rows routed. Expert parallelism (Program::ep > 1) runs on the backend's ep group, whose rank r holds
// global experts [r E/ep, (r+1) E/ep) (torchtitan's Shard(0) on ep): the counts exchange is a plain all-to-all, the
// dispatch and combine exchanges (variable splits) are all-to-alls with one slot of the rank's routed copies per peer,
// of which the counts say how many rows are real. The experts' FSDP collectives (Group::efsdp) run as FSDP's do.
//
// Errors (a malformed Program, a kernel precondition, float8 rowwise which only the simulator models) are
// tptune::Error naming the flat op ("layers.1.attention.wq.fwd: ...").

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plans/program/program.h"
#include "runtime/backend.h"

namespace tptune {

struct ExecutorOptions {
  bool run_optimizer = true;  // false: skip Phase::optimizer ops (verify compares gradients before the update)
  AdamWParams adamw;
  // A mixture of experts' expert_bias update (the optimizer pre-hook's moe_bias_update) runs without the optimizer
  // too (verify compares the updated buffers); false skips it (steps that must route alike, e.g. finite differences).
  bool update_expert_bias = true;
  // Single-rank mode for profiling one GPU: run rank 0's compute ops of a Program lowered for tp N (its local
  // shapes) on a backend whose TP group is this process alone, and skip every collective. What a skipped collective
  // would have written is seeded from this rank's own data (seed_skipped_collective(), executor_comm.cc), so that
  // everything downstream computes on data shaped like a real run's (not on zeros: a GEMM on zeros runs faster, an
  // amax on zeros skips its atomics). The values are not the tp N run's (its loss means nothing); their statistics
  // are close to them. 0: off.
  int local_shapes_of_tp = 0;
  // A pipeline stage's Program (plans/lower/rewrite/pipeline_stage.h): the microbatch this Executor runs, which tells
  // its transfers apart from the other microbatches' (their tags).
  int pp_microbatch = 0;
};

// What the Executor's constructor allocates for `program` on a backend with `storage_for` (Backend::storage_for),
// in bytes, without allocating it: one buffer per flat tensor (parameters, gradients, activations, optimizer
// state, every layer instantiated) in its storage, int32 inputs, and the fp32 master of every parameter stored in
// another format. The staging buffers collectives allocate on their first step are not counted, so this is a lower
// bound of the step's memory. Overflow-checked: throws tptune::Error.
int64_t executor_buffer_bytes(const Program& program, const std::function<Storage(DType)>& storage_for);

class Executor {
 public:
  Executor(Program program, Backend& backend, ExecutorOptions options = {});
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  const Program& program() const { return program_; }
  const FlatProgram& flat() const { return flat_; }
  int rank() const { return rank_; }
  int tp() const { return tp_; }

  // Parameters and inputs from `seed`; optimizer state and everything else zero.
  void init(uint64_t seed);

  // One training step. With `on_op`, ops run one at a time (every collective completed before the next op) and
  // on_op(flat op index, device microseconds) is called after each: the profiler's mode. Without it collectives
  // overlap compute as described above.
  using OpTimeFn = std::function<void(int op, double us)>;
  void step(const OpTimeFn& on_op = nullptr);

  // Runs the flat ops `keep` selects, in order and as step() runs them (collectives overlapping), then completes
  // every collective but the pipeline's sends: one stage's forward or backward of one microbatch under pipeline
  // parallelism (runtime/pipeline/run.h). No op is skipped for its phase: the caller selects. With `on_op`, one at a
  // time and timed, as step() with on_op.
  void run_ops(const std::function<bool(int op)>& keep, const OpTimeFn& on_op = nullptr);
  // Waits for the pipeline sends still in flight (see above).
  void wait_transfers() { complete_all(); }
  // The segment a flat op belongs to.
  SegmentKind segment_of(int op) const;
  // Flat id of the Program's tensor `t` in layer `layer` (-1: a global tensor); tptune::Error when there is none
  // (a layer chain's input is its previous layer's output: ask for that).
  int flat_tensor(TensorId t, int layer = -1) const { return flat_of(t, layer); }

  // Called after every op that ran (both modes), with its flat op index: the verifier inspects and replaces float8
  // casts of the reference run through it.
  void set_after_op(std::function<void(int op)> fn) { after_op_ = std::move(fn); }

  // True in the single-rank mode of ExecutorOptions::local_shapes_of_tp: collective ops are skipped (and seeded).
  bool skips_collectives() const { return options_.local_shapes_of_tp > 0; }
  // Single-rank mode: whether a skipped collective seeds its outputs each time it runs (on by default). Off, they
  // keep what the last seeding wrote, which stays sound (the same statistics, one step older) because nothing but
  // the collective writes them: turned off for steps that time the compute alone, so that the seeding's copies (a
  // collective's work in a real run) are not counted. A Program in which a compute op also writes a collective's
  // output (it would then drift step by step) keeps seeding whatever this says; seeding_persists() tells which.
  void set_seeding(bool on) { seeding_ = on; }
  bool seeding_persists() const { return seeding_persists_; }

  // Collectives issued and not yet waited for (introspection for tests of the overlap).
  size_t pending_collectives() const { return pending_.size(); }

  const TensorDesc& desc(int flat_tensor) const;
  // The local data of a flat tensor (int32 tensors converted to float).
  std::vector<float> read(int flat_tensor) const;
  void write(int flat_tensor, const std::vector<float>& values);
  float loss() const;
  // Flat id of Program::loss.
  int loss_tensor() const { return loss_; }

  // Every parameter of the model by full name ("layers.1.attention.wq.weight"), in Program order: the flat tensor
  // of its local value and of its final gradient (the tensor with role param_grad and the same `param`; -1 if the
  // Program has none).
  struct Param {
    std::string name;
    int value = -1, grad = -1;
  };
  std::vector<Param> parameters() const;

 private:
  struct Region {
    int tensor = -1;
    int slot = -1;  // async TP sequence slot; -1 the whole tensor
  };
  struct Pending {
    RequestPtr request;
    std::vector<Region> reads, writes;
    std::function<void()> finish;  // unpacks staged data once the request completed
    int op = -1;                   // the flat op that issued it, named when its wait fails (watchdog timeout)
    bool transfer_send = false;    // a pipeline send: left in flight by run_ops() (see above)
  };

  // executor.cc
  int flat_of(TensorId t, int layer) const;
  DevPtr ptr(int t) const;     // a floating-point tensor in its storage
  float* stat(int t) const;    // a tensor the backend calls take as fp32 statistics (rstd, lse, amax, moments...)
  float* master(int t) const;  // a parameter's fp32 master weights (its own buffer when that is fp32)
  const int32_t* i32(int t) const;
  void wait_conflicts(const std::vector<Region>& reads, const std::vector<Region>& writes);
  void complete(size_t pending_index);
  void complete_all();
  // complete_all() but for the pipeline sends.
  void complete_all_but_sends();
  // Waits for `p`'s request; an error (a watchdog timeout) is rethrown naming the op: "<op name>: <what>".
  void wait_request(Pending& p);
  void run_op(int index, bool eager);
  // One op as step() and run_ops() run it: overlapping, or (with on_op) alone and timed by `timer`.
  void run_in_turn(int index, Timer* timer, const OpTimeFn& on_op);
  [[noreturn]] void fail(const FlatOp& op, const std::string& what) const;
  Buffer& scratch(int op, int which, int64_t numel, Storage storage);

  // executor_compute.cc
  void run_compute(int index);
  void run_gemm(int index, const GemmOp& g);
  void run_elementwise(int index, const ElementwiseOp& e);
  void run_concat(int index);
  // Flat ops [first, last), all adamw: one Backend::adamw_multi (a multi-tensor launch per dtype group on CUDA), the
  // same update as running them one by one. step() batches runs of adamw ops unless it times each op.
  void run_adamw_group(size_t first, size_t last);
  size_t adamw_run_end(size_t first) const;
  std::vector<Region> chunk_regions(int index, bool outputs) const;
  int chunk_slot(const ChunkRef& c) const;

  // executor_comm.cc
  void issue_collective(int index, bool eager);
  void issue_p2p(int index, const CollectiveOp& c, bool eager);
  void issue_cp_p2p(int index, const CollectiveOp& c, bool eager);
  void issue_pp_transfer(int index, const CollectiveOp& c, bool eager);
  void issue_fsdp(int index, const CollectiveOp& c, bool eager);
  // Single-rank mode: writes what the skipped collective `index` would have written, from this rank's data.
  void seed_skipped_collective(int index);
  void finish_or_queue(Pending p, bool eager);

  // executor_moe.cc: mixture of experts. One block's routing, as its router and dispatcher ops leave it (per layer).
  struct MoeRouting {
    std::vector<int64_t> ids;         // each routed copy's expert (the router's choice)
    std::vector<int64_t> order;       // expert-sorted position -> routed copy (token x top_k + k)
    std::vector<int64_t> send;        // rows sent to each ep peer (the dispatch splits)
    std::vector<int64_t> recv;        // rows received from ep peer i for local expert e: recv[i x local experts + e]
    std::vector<int64_t> group_rows;  // rows of each local expert's group
  };
  void moe_setup();  // the data-dependent buffers (constructor)
  MoeRouting& moe_routing(int index);
  void run_moe(int index, const ElementwiseOp& e);
  void run_grouped_gemm(int index, const GemmOp& g);
  void issue_moe_exchange(int index, const CollectiveOp& c);
  std::vector<float> download_n(int t, int64_t n) const;
  void upload_n(int t, const std::vector<float>& v);
  std::vector<char> moe_rows_dynamic_;  // per Program tensor: its rows are the data-dependent received rows
  std::map<int, MoeRouting> moe_;       // per layer

  // executor_ring.cc: ring attention's blocks and merges (context parallelism)
  void run_ring_attention(int index, const AttentionOp& a);
  void run_attention_merge(int index);
  void rope_rows(const RopeShape& s, bool backward, DevPtr x, DevPtr y, int64_t first_row);

  Program program_;
  FlatProgram flat_;
  Backend& be_;
  ExecutorOptions options_;
  int rank_ = 0, tp_ = 1;
  int cp_ = 1, cp_rank_ = 0;           // context parallelism: the CP group
  std::vector<int64_t> cp_positions_;  // global sequence position of each local row (cp > 1)
  int step_ = 0;
  bool seeding_ = true, seeding_persists_ = true;
  int loss_ = -1, tokens_ = -1, targets_ = -1;
  std::vector<Buffer> buffers_;
  std::vector<Buffer> masters_;  // per flat tensor: the fp32 master of a parameter stored in another format
  std::vector<Pending> pending_;
  std::vector<std::vector<Buffer>> scratch_;  // per flat op: staging buffers kept across steps
  std::function<void(int)> after_op_;
};

}  // namespace tptune
