#pragma once
// A small RAII layer over the cuDNN 9 backend API (cudnn_graph.h) for building operation graphs: tensors (real,
// virtual, pass-by-value scalars), pointwise / matmul / reduction / reshape operations, and finalizing the graph
// into an execution plan with the first engine configuration cuDNN's heuristics (mode A) offer that finalizes.
// Private to kernels/cuda/ (attention_cudnn.cu uses it); every status is checked and a failure throws
// std::runtime_error naming the kernel, the call, cuDNN's status and its last error message.
//
// This is deliberately the shape of what cudnn-frontend's graph API does underneath (tensor UIDs, descriptors
// finalized bottom-up, heuristics, plan, variant pack), without the frontend itself (not installed here).

#include <cudnn_graph.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace tptune::cuda::cudnn {

// Throws when `status` is not CUDNN_STATUS_SUCCESS.
void check(cudnnStatus_t status, const char* kernel, const char* call);

// One backend descriptor (created on construction, destroyed on destruction).
class Descriptor {
 public:
  Descriptor(cudnnBackendDescriptorType_t type, const char* kernel);
  ~Descriptor();
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }
  // cudnnBackendSetAttribute / cudnnBackendFinalize, checked.
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const void* values);
  // One descriptor-valued attribute (an operation's tensors, its mode descriptor, the graph of the heuristics).
  void set(cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value);
  void finalize();

 private:
  cudnnBackendDescriptor_t d_ = nullptr;
  const char* kernel_;
};

struct TensorSpec {
  std::vector<int64_t> dims, strides;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  bool is_virtual = false;
  bool by_value = false;  // a host scalar passed in the variant pack
};

// An executable plan: the descriptors it needs stay alive with it.
struct Plan {
  std::vector<std::shared_ptr<Descriptor>> keep;
  std::shared_ptr<Descriptor> plan;
  int64_t workspace_bytes = 0;
};

class GraphBuilder {
 public:
  GraphBuilder(cudnnHandle_t handle, const char* kernel) : handle_(handle), kernel_(kernel) {}

  // Tensors return their UID (1, 2, ...: the variant pack refers to real tensors by it).
  int64_t tensor(const TensorSpec& spec);
  int64_t virtual_tensor(std::vector<int64_t> dims, std::vector<int64_t> strides,
                         cudnnDataType_t type = CUDNN_DATA_FLOAT);
  // A virtual tensor with the dims and strides of `like`.
  int64_t virtual_like(int64_t like, cudnnDataType_t type = CUDNN_DATA_FLOAT);
  int64_t scalar(cudnnDataType_t type = CUDNN_DATA_FLOAT);  // pass-by-value, dims {1, 1, 1, 1}

  // y = mode(x [, b [, t]]); axis for GEN_INDEX. b, t = 0 when absent.
  void pointwise(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t t, int64_t y,
                 cudnnDataType_t compute = CUDNN_DATA_FLOAT, int64_t axis = -1);
  void matmul(int64_t a, int64_t b, int64_t c);                    // c = a x b over the last two dims, fp32 compute
  void reduction(cudnnReduceTensorOp_t op, int64_t x, int64_t y);  // over the dims where y is 1 (or smaller)
  void reshape(int64_t x, int64_t y);                              // same data, y's dims and strides

  // The operation graph of the operations added so far, finalized (cuDNN checks the graph as a whole). With a null
  // handle (no device needed) it is a check of the graph only: it cannot be executed.
  std::shared_ptr<Descriptor> finalize_graph();
  int64_t operation_count() const { return int64_t(ops_.size()); }

  // Operation graph -> heuristics (mode A) -> the first engine configuration whose plan finalizes.
  Plan build();

 private:
  cudnnBackendDescriptor_t desc(int64_t uid) const { return tensors_.at(uid)->get(); }
  std::shared_ptr<Descriptor> make(cudnnBackendDescriptorType_t type);
  // An operation of the graph: a descriptor of `type` with its descriptor-valued attributes (its tensors, its mode
  // descriptor), set in order, finalized and added to the operations.
  using Operand = std::pair<cudnnBackendAttributeName_t, cudnnBackendDescriptor_t>;
  void add_operation(cudnnBackendDescriptorType_t type, const std::vector<Operand>& operands);

  cudnnHandle_t handle_;
  const char* kernel_;
  int64_t next_uid_ = 1;
  std::map<int64_t, std::shared_ptr<Descriptor>> tensors_;
  std::map<int64_t, TensorSpec> specs_;
  std::vector<std::shared_ptr<Descriptor>> keep_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

}  // namespace tptune::cuda::cudnn
