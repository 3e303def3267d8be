// [cuda] RMSNorm / LayerNorm forward and backward against kernels/cpu/norms, fp32 and bf16, on row widths below,
// at and above one block (32 .. 1024 threads) and a ragged row count.
#include "kernels/cuda/norms.h"

#include "kernels/cpu/norms.h"
#include "kernels/cuda/elementwise.h"
#include "tests/kernels/compare.h"
#include "tests/kernels/cuda/device.h"

using namespace tptune;
using test::DeviceArray;
using test::Tol;

namespace {
// dw/db sum over all rows: the sums are double on both sides, but a bf16 dw is rounded once (Tol<bf16> holds);
// for float the double sums differ in order only (1e-16 relative), so Tol<float> holds too.
struct Shape {
  int64_t rows, dim;
};
// {1, 7}: the scalar kernels (dim not a whole number of 16-byte packs); the others the packed ones: one pack per
// thread, 1000 rows (more than the backward's 4 slabs per SM: several rows per slab), and 16384 bf16 (2048 packs:
// 512 threads of 4 packs; fp32 at that width is the scalar path).
const Shape kShapes[] = {{1, 7}, {37, 256}, {300, 1000}, {64, 4096}, {1000, 64}, {3, 16384}};
}  // namespace

TEMPLATE_TEST_CASE("cuda rmsnorm forward and backward match the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  for (const Shape s : kShapes) {
    INFO("rows " << s.rows << ", dim " << s.dim);
    const size_t n = size_t(s.rows * s.dim), d = size_t(s.dim), r = size_t(s.rows);
    const auto x = test::rounded<T>(test::randn(n, 1, 2.0)), w = test::rounded<T>(test::randn(d, 2, 1.0, 1.0));
    const auto dy = test::rounded<T>(test::randn(n, 3));
    DeviceArray<T> dx_in(x), dw_in(w), ddy(dy), dyo(n), ddx(n), ddw(d);
    DeviceArray<float> drstd(r);
    cuda::rmsnorm_fwd<T>(nullptr, s.rows, s.dim, 1e-5, dx_in.get(), dw_in.get(), dyo.get(), drstd.get());
    std::vector<float> y(n), rstd(r), gx(n), gw(d);
    kernels::rmsnorm(x.data(), w.data(), s.rows, s.dim, 1e-5f, y.data(), rstd.data());
    test::check_close("rmsnorm y", dyo.floats(), y, Tol<T>::atol, Tol<T>::rtol);
    test::check_close("rmsnorm rstd", drstd.floats(), rstd, 0.0, 1e-6);  // fp32 on both sides
    // The backward from the CPU's rstd, so that both sides see the same statistics.
    DeviceArray<float> rstd_in(rstd);
    cuda::rmsnorm_bwd<T>(nullptr, s.rows, s.dim, dx_in.get(), dw_in.get(), rstd_in.get(), ddy.get(), ddx.get(),
                         ddw.get());
    kernels::rmsnorm_bwd(x.data(), w.data(), rstd.data(), dy.data(), s.rows, s.dim, gx.data(), gw.data());
    test::check_close("rmsnorm dx", ddx.floats(), gx, Tol<T>::atol, Tol<T>::rtol);
    test::check_close("rmsnorm dw", ddw.floats(), gw, Tol<T>::atol, Tol<T>::rtol);
  }
}

TEMPLATE_TEST_CASE("cuda layernorm forward and backward match the CPU", "[cuda]", float, __nv_bfloat16) {
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  for (const Shape s : kShapes) {
    INFO("rows " << s.rows << ", dim " << s.dim);
    const size_t n = size_t(s.rows * s.dim), d = size_t(s.dim), r = size_t(s.rows);
    // A mean of 3 against a spread of 1: the two-pass variance matters.
    const auto x = test::rounded<T>(test::randn(n, 4, 1.0, 3.0)), w = test::rounded<T>(test::randn(d, 5, 1.0, 1.0));
    const auto b = test::rounded<T>(test::randn(d, 6)), dy = test::rounded<T>(test::randn(n, 7));
    DeviceArray<T> dx_in(x), dw_in(w), db_in(b), ddy(dy), dyo(n), ddx(n), ddw(d), ddb(d);
    DeviceArray<float> dmean(r), drstd(r);
    cuda::layernorm_fwd<T>(nullptr, s.rows, s.dim, 1e-5, dx_in.get(), dw_in.get(), db_in.get(), dyo.get(), dmean.get(),
                           drstd.get());
    std::vector<float> y(n), mean(r), rstd(r), gx(n), gw(d), gb(d);
    kernels::layernorm(x.data(), w.data(), b.data(), s.rows, s.dim, 1e-5f, y.data(), mean.data(), rstd.data());
    test::check_close("layernorm y", dyo.floats(), y, Tol<T>::atol, Tol<T>::rtol);
    test::check_close("layernorm mean", dmean.floats(), mean, 1e-7, 1e-6);
    test::check_close("layernorm rstd", drstd.floats(), rstd, 0.0, 1e-6);
    DeviceArray<float> mean_in(mean), rstd_in(rstd);
    cuda::layernorm_bwd<T>(nullptr, s.rows, s.dim, dx_in.get(), dw_in.get(), mean_in.get(), rstd_in.get(), ddy.get(),
                           ddx.get(), ddw.get(), ddb.get());
    kernels::layernorm_bwd(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), s.rows, s.dim, gx.data(), gw.data(),
                           gb.data());
    test::check_close("layernorm dx", ddx.floats(), gx, Tol<T>::atol, Tol<T>::rtol);
    test::check_close("layernorm dw", ddw.floats(), gw, Tol<T>::atol, Tol<T>::rtol);
    test::check_close("layernorm db", ddb.floats(), gb, Tol<T>::atol, Tol<T>::rtol);
    // Deterministic (fixed reduction order, no atomics): a second run gives the same bits.
    const auto dw_first = ddw.floats(), dx_first = ddx.floats();
    cuda::layernorm_bwd<T>(nullptr, s.rows, s.dim, dx_in.get(), dw_in.get(), mean_in.get(), rstd_in.get(), ddy.get(),
                           ddx.get(), ddw.get(), ddb.get());
    CHECK(ddw.floats() == dw_first);
    CHECK(ddx.floats() == dx_first);
  }
}

TEMPLATE_TEST_CASE("cuda fused norms of a compiled Program equal the eager kernels they replace, bit for bit", "[cuda]",
                   float, __nv_bfloat16) {
  // add_rmsnorm_fwd = add, then rmsnorm_fwd of the stored sum; rmsnorm_bwd_add = rmsnorm_bwd, then add(dres, dx):
  // the same per-element arithmetic and rounding (packed path: one pass; elsewhere the eager pair itself).
  TPTUNE_CUDA_TEST_OR_SKIP();
  using T = TestType;
  for (const Shape s : kShapes) {
    INFO("rows " << s.rows << ", dim " << s.dim);
    const size_t n = size_t(s.rows * s.dim), d = size_t(s.dim), r = size_t(s.rows);
    const auto a = test::rounded<T>(test::randn(n, 11)), b = test::rounded<T>(test::randn(n, 12));
    const auto w = test::rounded<T>(test::randn(d, 13, 1.0, 1.0)), dy = test::rounded<T>(test::randn(n, 14));
    const auto dres = test::rounded<T>(test::randn(n, 15));
    DeviceArray<T> da(a), db(b), dw_in(w), ddy(dy), ddres(dres), h_e(n), y_e(n), h_f(n), y_f(n);
    DeviceArray<float> rstd_e(r), rstd_f(r);
    cuda::add<T>(nullptr, int64_t(n), da.get(), db.get(), h_e.get());
    cuda::rmsnorm_fwd<T>(nullptr, s.rows, s.dim, 1e-5, h_e.get(), dw_in.get(), y_e.get(), rstd_e.get());
    cuda::add_rmsnorm_fwd<T>(nullptr, s.rows, s.dim, 1e-5, da.get(), db.get(), dw_in.get(), h_f.get(), y_f.get(),
                             rstd_f.get());
    CHECK(h_f.floats() == h_e.floats());
    CHECK(y_f.floats() == y_e.floats());
    CHECK(rstd_f.floats() == rstd_e.floats());
    DeviceArray<T> dx_part(n), dx_e(n), dw_e(d), dx_f(n), dw_f(d);
    cuda::rmsnorm_bwd<T>(nullptr, s.rows, s.dim, h_e.get(), dw_in.get(), rstd_e.get(), ddy.get(), dx_part.get(),
                         dw_e.get());
    cuda::add<T>(nullptr, int64_t(n), ddres.get(), dx_part.get(), dx_e.get());
    cuda::rmsnorm_bwd_add<T>(nullptr, s.rows, s.dim, h_e.get(), dw_in.get(), rstd_e.get(), ddy.get(), ddres.get(),
                             dx_f.get(), dw_f.get());
    CHECK(dx_f.floats() == dx_e.floats());
    CHECK(dw_f.floats() == dw_e.floats());
  }
}
