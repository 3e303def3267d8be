// CpuBackend collectives on MPI_COMM_WORLD (run with mpirun -np 2 and -np 4). Inputs are functions of the rank and
// the index, so every expected value is a closed form of the world size W.
#include <mpi.h>

#include <catch2/catch.hpp>
#include <vector>

#include "runtime/cpu/cpu_backend.h"

using namespace tptune;

namespace {
struct World {
  int rank = 0, size = 1;
  World() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
  }
};
}  // namespace

TEST_CASE("all_reduce sum and max over the TP group", "[mpi]") {
  World w;
  CpuBackend be(MPI_COMM_WORLD);
  REQUIRE(be.group_size(Group::tp) == w.size);
  REQUIRE(be.group_rank(Group::tp) == w.rank);
  const int n = 5;
  std::vector<float> x(n), sum(n), mx(n);
  for (int i = 0; i < n; ++i) x[size_t(i)] = float(100 * w.rank + i);
  auto r1 = be.all_reduce(Group::tp, ReduceOp::sum, x.data(), sum.data(), n);
  std::vector<float> y(n);
  for (int i = 0; i < n; ++i) y[size_t(i)] = float(w.rank * (i + 1));
  auto r2 = be.all_reduce(Group::tp, ReduceOp::max, y.data(), mx.data(), n);  // two in flight
  r2->wait();
  r1->wait();
  for (int i = 0; i < n; ++i) {
    // sum_r (100 r + i) = 100 W(W-1)/2 + W i
    CHECK(sum[size_t(i)] == float(100 * w.size * (w.size - 1) / 2 + w.size * i));
    // max_r r (i+1) = (W-1)(i+1)
    CHECK(mx[size_t(i)] == float((w.size - 1) * (i + 1)));
  }
  // In place.
  be.all_reduce(Group::tp, ReduceOp::sum, x.data(), x.data(), n)->wait();
  CHECK(x == sum);
}

TEST_CASE("all_gather concatenates rank slices in rank order", "[mpi]") {
  World w;
  CpuBackend be(MPI_COMM_WORLD);
  std::vector<float> in{float(w.rank), w.rank + 0.5f}, out(size_t(2 * w.size), -1.0f);
  be.all_gather(Group::tp, in.data(), out.data(), 2)->wait();
  for (int r = 0; r < w.size; ++r) {
    CHECK(out[size_t(2 * r)] == float(r));
    CHECK(out[size_t(2 * r + 1)] == r + 0.5f);
  }
}

TEST_CASE("reduce_scatter leaves rank r with the reduced slice r", "[mpi]") {
  World w;
  CpuBackend be(MPI_COMM_WORLD);
  const int n = 3;
  std::vector<float> in(size_t(n * w.size)), out(n);
  for (int j = 0; j < n * w.size; ++j) in[size_t(j)] = float(j + 1000 * w.rank);
  be.reduce_scatter(Group::tp, ReduceOp::sum, in.data(), out.data(), n)->wait();
  for (int i = 0; i < n; ++i) {
    int j = w.rank * n + i;  // sum_r (j + 1000 r) = W j + 1000 W(W-1)/2
    CHECK(out[size_t(i)] == float(w.size * j + 1000 * w.size * (w.size - 1) / 2));
  }
}

TEST_CASE("all_to_all sends slice j to rank j", "[mpi]") {
  World w;
  CpuBackend be(MPI_COMM_WORLD);
  std::vector<float> in(size_t(2 * w.size)), out(size_t(2 * w.size));
  for (int j = 0; j < w.size; ++j) {
    in[size_t(2 * j)] = float(10 * w.rank + j);
    in[size_t(2 * j + 1)] = -float(10 * w.rank + j);
  }
  be.all_to_all(Group::tp, in.data(), out.data(), 2)->wait();
  for (int i = 0; i < w.size; ++i) {  // rank i sent us 10 i + rank
    CHECK(out[size_t(2 * i)] == float(10 * i + w.rank));
    CHECK(out[size_t(2 * i + 1)] == -float(10 * i + w.rank));
  }
}

TEST_CASE("ring send_recv steps in flight together do not mix", "[mpi]") {
  World w;
  CpuBackend be(MPI_COMM_WORLD);
  int next = (w.rank + 1) % w.size, prev = (w.rank + w.size - 1) % w.size;
  std::vector<float> a{float(w.rank)}, b{float(100 + w.rank)}, ra{-1}, rb{-1};
  // Step 1 sends forward, step 2 backward; both are issued before either is waited on, and waited in reverse order.
  auto s1 = be.send_recv(Group::tp, a.data(), next, ra.data(), prev, 1);
  auto s2 = be.send_recv(Group::tp, b.data(), prev, rb.data(), next, 1);
  s2->wait();
  s1->wait();
  CHECK(ra[0] == float(prev));
  CHECK(rb[0] == float(100 + next));
  CHECK(s1->test());
}

TEST_CASE("the DP group of size one needs no peer", "[mpi]") {
  World w;
  CpuBackend be(MPI_COMM_WORLD, MPI_COMM_NULL);
  CHECK(be.group_size(Group::dp) == 1);
  std::vector<float> x{float(w.rank)}, y{-1};
  be.all_reduce(Group::dp, ReduceOp::sum, x.data(), y.data(), 1)->wait();
  CHECK(y[0] == float(w.rank));
}

TEST_CASE("one-way send and recv on the pipeline group pair by tag, not by issue order", "[mpi][pp]") {
  World w;
  CpuBackend be(MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_NULL, MPI_COMM_WORLD);
  REQUIRE(be.group_size(Group::pp) == w.size);
  REQUIRE(be.max_p2p_tag() >= 1000);
  // Each rank sends two messages to the next rank, tag 1 first, and receives the previous rank's tag 0 first: each
  // receive must get the message of its own tag, 10 r + tag from rank r.
  const int next = (w.rank + 1) % w.size, prev = (w.rank + w.size - 1) % w.size;
  std::vector<float> a(3, float(10 * w.rank + 1)), b(3, float(10 * w.rank + 0)), got0(3, -1), got1(3, -1);
  auto s1 = be.send(Group::pp, a.data(), next, 3, 1);
  auto s0 = be.send(Group::pp, b.data(), next, 3, 0);
  be.recv(Group::pp, got0.data(), prev, 3, 0)->wait();
  be.recv(Group::pp, got1.data(), prev, 3, 1)->wait();
  s0->wait();
  s1->wait();
  CHECK(got0 == std::vector<float>(3, float(10 * prev + 0)));
  CHECK(got1 == std::vector<float>(3, float(10 * prev + 1)));
  // To this rank itself (a V schedule's middle stages): the send issued first, then its receive.
  std::vector<float> self(2, -1), mine{7, 8};
  auto s = be.send(Group::pp, mine.data(), w.rank, 2, 5);
  be.recv(Group::pp, self.data(), w.rank, 2, 5)->wait();
  s->wait();
  CHECK(self == mine);
  CHECK_THROWS_WITH(be.send(Group::pp, mine.data(), w.size, 2, 0),
                    Catch::Contains("send: peer rank") && Catch::Contains("outside a group of"));
  CHECK_THROWS_WITH(be.recv(Group::pp, self.data(), 0, 2, -1), Catch::Contains("recv: tag -1 outside 0.."));
}
