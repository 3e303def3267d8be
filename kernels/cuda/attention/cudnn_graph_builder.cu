// The cuDNN backend-API graph builder; see cudnn_graph_builder.h.
#include <stdexcept>

#include "kernels/cuda/attention/cudnn_graph_builder.h"

namespace tptune::cuda::cudnn {

void check(cudnnStatus_t status, const char* kernel, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  char last[1024] = {0};
  cudnnGetLastErrorString(last, sizeof last);
  throw std::runtime_error(std::string("cuda kernel ") + kernel + ": " + call + ": " + cudnnGetErrorString(status) +
                           (last[0] ? std::string(" (") + last + ")" : std::string()));
}

Descriptor::Descriptor(cudnnBackendDescriptorType_t type, const char* kernel) : kernel_(kernel) {
  check(cudnnBackendCreateDescriptor(type, &d_), kernel_, "cudnnBackendCreateDescriptor");
}

Descriptor::~Descriptor() {
  if (d_) cudnnBackendDestroyDescriptor(d_);
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count,
                     const void* values) {
  check(cudnnBackendSetAttribute(d_, name, type, count, values), kernel_, "cudnnBackendSetAttribute");
}

void Descriptor::set(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value) {
  set(name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value);
}

void Descriptor::finalize() { check(cudnnBackendFinalize(d_), kernel_, "cudnnBackendFinalize"); }

std::shared_ptr<Descriptor> GraphBuilder::make(cudnnBackendDescriptorType_t type) {
  auto d = std::make_shared<Descriptor>(type, kernel_);
  keep_.push_back(d);
  return d;
}

int64_t GraphBuilder::tensor(const TensorSpec& s) {
  if (s.dims.empty() || s.dims.size() != s.strides.size())
    throw std::logic_error(std::string("cuda kernel ") + kernel_ + ": tensor dims and strides mismatch");
  const int64_t uid = next_uid_++;
  auto d = make(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const int64_t alignment = 16, rank = int64_t(s.dims.size());
  d->set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s.type);
  d->set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, rank, s.dims.data());
  d->set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, rank, s.strides.data());
  d->set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  d->set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  if (s.is_virtual) {
    const bool yes = true;
    d->set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  if (s.by_value) {
    const bool yes = true;
    d->set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
  }
  d->finalize();
  tensors_[uid] = d;
  specs_[uid] = s;
  return uid;
}

int64_t GraphBuilder::virtual_tensor(std::vector<int64_t> dims, std::vector<int64_t> strides, cudnnDataType_t type) {
  TensorSpec s;
  s.dims = std::move(dims);
  s.strides = std::move(strides);
  s.type = type;
  s.is_virtual = true;
  return tensor(s);
}

int64_t GraphBuilder::virtual_like(int64_t like, cudnnDataType_t type) {
  const TensorSpec& l = specs_.at(like);
  return virtual_tensor(l.dims, l.strides, type);
}

int64_t GraphBuilder::scalar(cudnnDataType_t type) {
  TensorSpec s;
  s.dims = {1, 1, 1, 1};  // the rank of the tensors it meets: cuDNN's pointwise wants equal ranks
  s.strides = {1, 1, 1, 1};
  s.type = type;
  s.by_value = true;
  return tensor(s);
}

void GraphBuilder::add_operation(cudnnBackendDescriptorType_t type, const std::vector<Operand>& operands) {
  auto op = make(type);
  for (const auto& [name, value] : operands) op->set(name, value);
  op->finalize();
  ops_.push_back(op->get());
}

void GraphBuilder::pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t, int64_t y,
                             cudnnDataType_t compute, int64_t axis) {
  auto pw = make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw->set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  pw->set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  if (axis >= 0) pw->set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  pw->finalize();
  std::vector<Operand> operands = {{CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw->get()},
                                   {CUDNN_ATTR_OPERATION_POINTWISE_XDESC, desc(x)}};
  if (b) operands.push_back({CUDNN_ATTR_OPERATION_POINTWISE_BDESC, desc(b)});
  if (t) operands.push_back({CUDNN_ATTR_OPERATION_POINTWISE_TDESC, desc(t)});
  operands.push_back({CUDNN_ATTR_OPERATION_POINTWISE_YDESC, desc(y)});
  add_operation(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, operands);
}

void GraphBuilder::matmul(int64_t a, int64_t b, int64_t c) {
  auto mm = make(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  mm->set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  mm->finalize();
  add_operation(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, {{CUDNN_ATTR_OPERATION_MATMUL_ADESC, desc(a)},
                                                            {CUDNN_ATTR_OPERATION_MATMUL_BDESC, desc(b)},
                                                            {CUDNN_ATTR_OPERATION_MATMUL_CDESC, desc(c)},
                                                            {CUDNN_ATTR_OPERATION_MATMUL_DESC, mm->get()}});
}

void GraphBuilder::reduction(cudnnReduceTensorOp_t mode, int64_t x, int64_t y) {
  auto red = make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  red->set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
  red->set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
  red->finalize();
  add_operation(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, {{CUDNN_ATTR_OPERATION_REDUCTION_XDESC, desc(x)},
                                                               {CUDNN_ATTR_OPERATION_REDUCTION_YDESC, desc(y)},
                                                               {CUDNN_ATTR_OPERATION_REDUCTION_DESC, red->get()}});
}

void GraphBuilder::reshape(int64_t x, int64_t y) {
  add_operation(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR,
                {{CUDNN_ATTR_OPERATION_RESHAPE_XDESC, desc(x)}, {CUDNN_ATTR_OPERATION_RESHAPE_YDESC, desc(y)}});
}

// CUDNN_ATTR_OPERATIONGRAPH_HANDLE and CUDNN_ATTR_EXECUTION_PLAN_HANDLE are marked deprecated in cuDNN 9.19's
// header but still what cudnn-frontend sets; the enum values are used without the deprecated names.
constexpr auto kGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);  // CUDNN_ATTR_OPERATIONGRAPH_HANDLE
constexpr auto kPlanHandle = static_cast<cudnnBackendAttributeName_t>(400);   // CUDNN_ATTR_EXECUTION_PLAN_HANDLE

std::shared_ptr<Descriptor> GraphBuilder::finalize_graph() {
  auto graph = make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  if (handle_) graph->set(kGraphHandle, CUDNN_TYPE_HANDLE, 1, &handle_);
  graph->set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, int64_t(ops_.size()), ops_.data());
  graph->finalize();
  return graph;
}

Plan GraphBuilder::build() {
  auto graph = finalize_graph();

  auto heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  heur->set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph->get());
  heur->set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  heur->finalize();
  int64_t count = 0;
  check(cudnnBackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count,
                                 nullptr),
        kernel_, "cudnnBackendGetAttribute (engine heuristics count)");
  if (count <= 0)
    throw std::runtime_error(std::string("cuda kernel ") + kernel_ +
                             ": cuDNN heuristics offer no engine for this attention graph");
  std::vector<std::shared_ptr<Descriptor>> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int64_t i = 0; i < count; ++i) {
    configs.push_back(make(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(configs.back()->get());
  }
  int64_t returned = 0;
  check(cudnnBackendGetAttribute(heur->get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &returned, raw.data()),
        kernel_, "cudnnBackendGetAttribute (engine heuristics results)");

  std::string failures;
  for (int64_t i = 0; i < returned; ++i) {
    auto plan = std::make_shared<Descriptor>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, kernel_);
    plan->set(kPlanHandle, CUDNN_TYPE_HANDLE, 1, &handle_);
    plan->set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[size_t(i)]);
    const cudnnStatus_t status = cudnnBackendFinalize(plan->get());
    if (status != CUDNN_STATUS_SUCCESS) {  // this engine cannot run the graph here: try the next one
      failures += std::string(failures.empty() ? "" : "; ") + cudnnGetErrorString(status);
      continue;
    }
    Plan p;
    p.plan = plan;
    p.keep = keep_;
    for (auto& t : tensors_) p.keep.push_back(t.second);
    int64_t n = 0;
    check(cudnnBackendGetAttribute(plan->get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                   &p.workspace_bytes),
          kernel_, "cudnnBackendGetAttribute (workspace size)");
    return p;
  }
  throw std::runtime_error(std::string("cuda kernel ") + kernel_ + ": none of the " + std::to_string(returned) +
                           " engine configurations cuDNN offers finalizes a plan for this attention graph (" +
                           failures + ")");
}

}  // namespace tptune::cuda::cudnn
