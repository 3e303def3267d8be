// [cuda] multi-tensor AdamW against kernels/cpu/adamw: 100 tensors of mixed sizes (three launches of up to 48,
// an empty tensor among them), fp32 gradients (bit-identical to the CPU) and bf16 gradients, over three steps.
#include "kernels/cuda/adamw.h"

#include <memory>

#include "kernels/cpu/adamw.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;

TEMPLATE_TEST_CASE("cuda multi-tensor adamw matches the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  kernels::AdamWConfig cfg;
  cfg.lr = 1e-3, cfg.beta1 = 0.9, cfg.beta2 = 0.95, cfg.eps = 1e-8, cfg.weight_decay = 0.1;
  struct Param {
    std::vector<float> p, g, m, v;
    std::unique_ptr<DeviceArray<float>> dp, dm, dv;
    std::unique_ptr<DeviceArray<T>> dg;
  };
  std::vector<Param> params(100);
  for (size_t i = 0; i < params.size(); ++i) {
    const size_t n = i == 17 ? 0 : (i * 7919) % 70001 + 1;  // 1 .. 70001 elements, one empty
    Param& q = params[i];
    q.p = test::randn(n, uint32_t(3 * i + 1));
    q.g = test::rounded<T>(test::randn(n, uint32_t(3 * i + 2), 1e-2));
    q.m.assign(n, 0.0f);
    q.v.assign(n, 0.0f);
    q.dp = std::make_unique<DeviceArray<float>>(q.p);
    q.dm = std::make_unique<DeviceArray<float>>(q.m);
    q.dv = std::make_unique<DeviceArray<float>>(q.v);
    q.dg = std::make_unique<DeviceArray<T>>(q.g);
  }
  std::vector<cuda::AdamWTensor<T>> list;
  for (Param& q : params) list.push_back({q.dp->get(), q.dg->get(), q.dm->get(), q.dv->get(), int64_t(q.p.size())});
  for (int64_t step = 1; step <= 3; ++step) {
    cuda::adamw<T>(nullptr, list, cfg, step);
    for (Param& q : params)
      kernels::adamw(q.p.data(), q.g.data(), q.m.data(), q.v.data(), int64_t(q.p.size()), cfg, step);
  }
  // The same double operations in the same order with FMA contraction off (kernels/CMakeLists.txt): the result is
  // exactly the CPU's whatever the gradient's storage (the bf16 gradient was rounded before both saw it); sqrt and
  // division are correctly rounded on both.
  for (size_t i = 0; i < params.size(); ++i) {
    INFO("tensor " << i);
    test::check_close("p", params[i].dp->floats(), params[i].p, 0.0, 0.0);
    test::check_close("m", params[i].dm->floats(), params[i].m, 0.0, 0.0);
    test::check_close("v", params[i].dv->floats(), params[i].v, 0.0, 0.0);
  }
  CHECK_THROWS_WITH(cuda::adamw<T>(nullptr, list, cfg, 0), Catch::Contains("adamw") && Catch::Contains("1-based"));
}
