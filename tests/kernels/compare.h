#pragma once
// Test helpers for the kernel tests: tolerance comparison that prints the first mismatches, seeded random data,
// and a central finite-difference gradient in double.

#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tptune::test {

// CHECKs |got[i] - ref[i]| <= atol + rtol * |ref[i]| for every i (NaN never passes); on failure the message names
// how many elements failed and shows the first five. With TPTUNE_SHOW_WORST=1 in the environment every
// comparison also reports its worst |diff| (a WARN), which is how the tolerances in these tests were sized.
inline void check_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& ref,
                        double atol, double rtol) {
  REQUIRE(got.size() == ref.size());
  size_t bad = 0;
  double worst = 0.0;
  std::ostringstream first;
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::fabs(double(got[i]) - ref[i]);
    const double tol = atol + rtol * std::fabs(ref[i]);
    if (!(diff <= tol)) {
      if (bad < 5)
        first << "\n  [" << i << "] got " << got[i] << ", ref " << ref[i] << ", |diff| " << diff << " > " << tol;
      ++bad;
    }
    if (diff > worst || std::isnan(diff)) worst = diff;
  }
  INFO(what << ": " << bad << " of " << got.size() << " elements off (atol " << atol << ", rtol " << rtol
            << ", worst |diff| " << worst << ")" << first.str());
  if (std::getenv("TPTUNE_SHOW_WORST")) WARN(what << ": worst |diff| " << worst);
  CHECK(bad == 0);
}

inline void check_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& ref,
                        double atol, double rtol) {
  check_close(what, got, std::vector<double>(ref.begin(), ref.end()), atol, rtol);
}

// n floats ~ N(mean, stddev), deterministic in seed.
inline std::vector<float> randn(size_t n, uint32_t seed, double stddev = 1.0, double mean = 0.0) {
  std::mt19937 gen(seed);
  std::normal_distribution<double> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = float(dist(gen));
  return v;
}

inline std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

// d f / d x by central differences in double: (f(x + h e_i) - f(x - h e_i)) / 2h. With h = 1e-6 and f = O(100)
// the error is ~h^2 f''' + 1e-16 |f| / h ~ 1e-8, far below the float kernels' own error.
inline std::vector<double> finite_diff(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x, double h = 1e-6) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double xi = x[i];
    x[i] = xi + h;
    const double fp = f(x);
    x[i] = xi - h;
    const double fm = f(x);
    x[i] = xi;
    g[i] = (fp - fm) / (2.0 * h);
  }
  return g;
}

// sum_i a[i] * b[i] in double.
inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

}  // namespace tptune::test
