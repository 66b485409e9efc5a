// The op functions of core/ops with N ranks as threads over the TCP transport and a MemoryStore:
// requests go through negotiation and the fusion planner exactly as in the runtime, and every
// output is compared with a reference computed here from what each rank contributed. The cases
// aim at packing and unpacking: fused allgather with a different dim0 per rank, reducescatter
// with rows that do not divide by the ranks, alltoall with uneven splits, and fused allreduce
// whose tensors do not all fit in one fusion buffer.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/coordinator/response_builder.h"
#include "core/coordinator/tensor_queue.h"
#include "core/fusion/fusion_buffer.h"
#include "core/fusion/fusion_planner.h"
#include "core/ops/executor.h"
#include "core/store/memory_store.h"
#include "core/transport/transport.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

using namespace std::chrono_literals;

// ---- values ----------------------------------------------------------------------------------
// Small integers in every dtype, so sums are exact and results compare exactly.

void setValue(void* buf, DataType dt, size_t i, int64_t v) {
  switch (dt) {
    case DataType::Int32: static_cast<int32_t*>(buf)[i] = static_cast<int32_t>(v); break;
    case DataType::Int64: static_cast<int64_t*>(buf)[i] = v; break;
    case DataType::Float32: static_cast<float*>(buf)[i] = static_cast<float>(v); break;
    case DataType::Float64: static_cast<double*>(buf)[i] = static_cast<double>(v); break;
    default: FAIL() << "dtype not used by these tests";
  }
}

double getValue(const void* buf, DataType dt, size_t i) {
  switch (dt) {
    case DataType::Int32: return static_cast<const int32_t*>(buf)[i];
    case DataType::Int64: return static_cast<double>(static_cast<const int64_t*>(buf)[i]);
    case DataType::Float32: return static_cast<const float*>(buf)[i];
    case DataType::Float64: return static_cast<const double*>(buf)[i];
    default: return -1e300;
  }
}

// The value rank `rank` puts at element i of tensor t: unique per (rank, tensor, element).
int64_t valueOf(int rank, size_t t, size_t i) {
  return static_cast<int64_t>(rank) * 1000 + static_cast<int64_t>(t) * 100 +
         static_cast<int64_t>(i % 97);
}

// ---- one tensor of one rank ---------------------------------------------------------------

struct Local {
  std::vector<uint8_t> bytes;
  TensorEntry entry;
};

std::unique_ptr<Local> makeLocal(int rank, size_t t, const Request& base,
                                 std::vector<int64_t> shape) {
  auto l = std::make_unique<Local>();
  int64_t numel = 1;
  for (int64_t d : shape) numel *= d;
  l->bytes.assign(static_cast<size_t>(numel) * dtypeSize(base.dtype) + 1, 0);
  for (size_t i = 0; i < static_cast<size_t>(numel); ++i) {
    setValue(l->bytes.data(), base.dtype, i, valueOf(rank, t, i));
  }
  l->entry.request = base;
  l->entry.request.rank = rank;
  l->entry.request.shape = shape;
  l->entry.tensor.data = l->bytes.data();
  l->entry.tensor.dtype = base.dtype;
  l->entry.tensor.shape = std::move(shape);
  l->entry.handle = std::make_shared<Handle>();
  return l;
}

// ---- running a job -----------------------------------------------------------------------

ConnectOptions connectOptions(int rank, int size) {
  return test::loopbackOptions(rank, size, "ops-test", 20000ms);
}

// What the coordinator would answer: one response per tensor from every rank's request (ascending
// rank), fused by the planner. `requestsOf(rank)` gives that rank's requests, one per tensor.
std::vector<Response> negotiate(int n, size_t tensors,
                                const std::function<std::vector<Request>(int rank)>& requestsOf,
                                int64_t fusionThreshold) {
  std::vector<std::vector<Request>> all;
  for (int r = 0; r < n; ++r) all.push_back(requestsOf(r));
  std::vector<Response> singles;
  for (size_t t = 0; t < tensors; ++t) {
    std::vector<Request> reqs;
    NegotiationInput in;
    for (int r = 0; r < n; ++r) {
      reqs.push_back(all[r][t]);
      in.setRanks.push_back(r);
    }
    in.requests = &reqs;
    in.setSize = n;
    singles.push_back(negotiateResponse(in));
    EXPECT_NE(singles.back().kind, OpKind::Error) << singles.back().errorMessage;
  }
  return planFusion(std::move(singles), fusionThreshold, [n](int) { return n; });
}

// Runs `plan` on rank `rank`: every response with this rank's entries for its names, in order.
void execute(Communicator& comm, const std::vector<Response>& plan,
             std::vector<std::unique_ptr<Local>>& locals) {
  FusionBuffer fusion;
  std::vector<int> setRanks;
  for (int r = 0; r < comm.size(); ++r) setRanks.push_back(r);
  for (const Response& resp : plan) {
    std::vector<TensorEntry*> entries;
    for (const auto& name : resp.names) {
      TensorEntry* found = nullptr;
      for (auto& l : locals) {
        if (l->entry.request.name == name) found = &l->entry;
      }
      ASSERT_NE(found, nullptr) << name;
      entries.push_back(found);
    }
    OpContext cx{comm, fusion, setRanks, entries, nullptr};
    executeResponse(resp, cx);
    for (TensorEntry* e : entries) {
      ASSERT_TRUE(e->handle->poll());
      e->handle->rethrowIfFailed();
    }
  }
}

void runRanks(int n, const std::function<void(int rank, Communicator& comm)>& body) {
  MemoryStore store;
  test::spawnRanks(n, [&](int rank) {
    Connection c = makeTransport("tcp")->connect(connectOptions(rank, n), store);
    body(rank, *c.world);
  });
}

std::vector<std::string> namesOf(const std::vector<Response>& plan, size_t i) {
  return i < plan.size() ? plan[i].names : std::vector<std::string>{};
}

std::string tensorName(size_t t) { return "t" + std::to_string(t); }

// ---- refusals --------------------------------------------------------------------------

// An op that refuses its tensors after negotiation (Adasum on integers, which the enqueue check
// normally stops first) fails their handles with InvalidCollectiveError, the class of every
// refusal after negotiation, without throwing: the job goes on.
TEST(OpsRefusal, AnOpRefusingItsTensorsFailsTheirHandlesAsAnInvalidCollective) {
  runRanks(1, [](int rank, Communicator& comm) {
    Request base;
    base.kind = OpKind::Adasum;
    base.dtype = DataType::Int32;
    base.name = tensorName(0);
    auto local = makeLocal(rank, 0, base, {4});
    Response r;
    r.kind = OpKind::Adasum;
    r.names = {base.name};
    r.dtype = DataType::Int32;
    r.elementCounts = {4};
    FusionBuffer fusion;
    std::vector<int> setRanks{0};
    std::vector<TensorEntry*> entries{&local->entry};
    OpContext cx{comm, fusion, setRanks, entries, nullptr};
    EXPECT_NO_THROW(executeResponse(r, cx));
    ASSERT_TRUE(local->entry.handle->poll());
    try {
      local->entry.handle->rethrowIfFailed();
      ADD_FAILURE() << "the handle did not fail";
    } catch (const InvalidCollectiveError& e) {
      EXPECT_NE(std::string(e.what()).find("floating-point tensors only"), std::string::npos);
    }
  });
}

// ---- fused allgather ---------------------------------------------------------------------

struct AllgatherCase {
  std::string name;
  int ranks;
  DataType dtype;
  std::vector<int64_t> rowElements;  // per tensor; the tensor count
  // dim0 of tensor t on rank r
  std::function<int64_t(int r, size_t t)> rows;
};

void PrintTo(const AllgatherCase& c, std::ostream* os) { *os << c.name; }

class OpsAllgather : public ::testing::TestWithParam<AllgatherCase> {};

TEST_P(OpsAllgather, EveryRankGetsEveryRanksRowsInRankOrder) {
  const AllgatherCase& c = GetParam();
  const size_t tensors = c.rowElements.size();
  auto requestsOf = [&](int rank) {
    std::vector<Request> out;
    for (size_t t = 0; t < tensors; ++t) {
      Request q;
      q.kind = OpKind::Allgather;
      q.name = tensorName(t);
      q.dtype = c.dtype;
      q.rank = rank;
      q.shape = {c.rows(rank, t), c.rowElements[t]};
      out.push_back(q);
    }
    return out;
  };
  auto plan = negotiate(c.ranks, tensors, requestsOf, 1 << 20);
  ASSERT_EQ(plan.size(), 1u) << "every tensor fits in one fusion buffer";
  ASSERT_EQ(plan[0].tensorCount(), tensors);

  runRanks(c.ranks, [&](int rank, Communicator& comm) {
    std::vector<std::unique_ptr<Local>> locals;
    auto reqs = requestsOf(rank);
    for (size_t t = 0; t < tensors; ++t)
      locals.push_back(makeLocal(rank, t, reqs[t], reqs[t].shape));
    execute(comm, plan, locals);
    for (size_t t = 0; t < tensors; ++t) {
      const OutputTensor& out = locals[t]->entry.handle->output;
      int64_t totalRows = 0;
      for (int r = 0; r < c.ranks; ++r) totalRows += c.rows(r, t);
      ASSERT_EQ(out.shape, (std::vector<int64_t>{totalRows, c.rowElements[t]})) << "tensor " << t;
      size_t at = 0;
      for (int r = 0; r < c.ranks; ++r) {
        size_t elements = static_cast<size_t>(c.rows(r, t) * c.rowElements[t]);
        for (size_t i = 0; i < elements; ++i, ++at) {
          ASSERT_EQ(getValue(out.data(), c.dtype, at), static_cast<double>(valueOf(r, t, i)))
              << "tensor " << t << " from rank " << r << " element " << i;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OpsAllgather,
    ::testing::Values(
        AllgatherCase{"Ranks2_OneTensor_Float32",
                      2,
                      DataType::Float32,
                      {3},
                      [](int r, size_t) { return int64_t{2 + 3 * r}; }},
        AllgatherCase{"Ranks2_ThreeTensors_Float32",
                      2,
                      DataType::Float32,
                      {1, 3, 2},
                      [](int r, size_t t) { return static_cast<int64_t>(1 + r + 2 * t); }},
        AllgatherCase{"Ranks3_FourTensors_SomeEmpty_Int64",
                      3,
                      DataType::Int64,
                      {2, 1, 4, 3},
                      [](int r, size_t t) { return static_cast<int64_t>((r * 3 + t * 2) % 5); }},
        AllgatherCase{"Ranks4_ThreeTensors_Float64",
                      4,
                      DataType::Float64,
                      {5, 1, 2},
                      [](int r, size_t t) { return static_cast<int64_t>(4 - r + t); }}),
    [](const ::testing::TestParamInfo<AllgatherCase>& info) { return info.param.name; });

// ---- uneven reducescatter ----------------------------------------------------------------

struct ReducescatterCase {
  std::string name;
  int ranks;
  DataType dtype;
  ReduceOp op;
  std::vector<int64_t> dim0;         // per tensor
  std::vector<int64_t> rowElements;  // per tensor
  double prescale = 1.0;
};

void PrintTo(const ReducescatterCase& c, std::ostream* os) { *os << c.name; }

class OpsReducescatter : public ::testing::TestWithParam<ReducescatterCase> {};

// Rows of dim0 that rank k receives: the first dim0 % n ranks get one extra row.
int64_t rowsOfRank(int64_t dim0, int n, int k) { return dim0 / n + (k < dim0 % n ? 1 : 0); }

TEST_P(OpsReducescatter, EachRankGetsTheReductionOfItsRows) {
  const ReducescatterCase& c = GetParam();
  const size_t tensors = c.dim0.size();
  auto requestsOf = [&](int rank) {
    std::vector<Request> out;
    for (size_t t = 0; t < tensors; ++t) {
      Request q;
      q.kind = OpKind::Reducescatter;
      q.name = tensorName(t);
      q.dtype = c.dtype;
      q.reduceOp = c.op;
      q.prescale = c.prescale;
      q.rank = rank;
      q.shape = {c.dim0[t], c.rowElements[t]};
      out.push_back(q);
    }
    return out;
  };
  auto plan = negotiate(c.ranks, tensors, requestsOf, 1 << 20);
  ASSERT_EQ(plan.size(), 1u);

  runRanks(c.ranks, [&](int rank, Communicator& comm) {
    std::vector<std::unique_ptr<Local>> locals;
    auto reqs = requestsOf(rank);
    for (size_t t = 0; t < tensors; ++t)
      locals.push_back(makeLocal(rank, t, reqs[t], reqs[t].shape));
    execute(comm, plan, locals);
    for (size_t t = 0; t < tensors; ++t) {
      int64_t firstRow = 0;
      for (int k = 0; k < rank; ++k) firstRow += rowsOfRank(c.dim0[t], c.ranks, k);
      int64_t myRows = rowsOfRank(c.dim0[t], c.ranks, rank);
      const OutputTensor& out = locals[t]->entry.handle->output;
      ASSERT_EQ(out.shape, (std::vector<int64_t>{myRows, c.rowElements[t]})) << "tensor " << t;
      for (int64_t i = 0; i < myRows * c.rowElements[t]; ++i) {
        size_t src = static_cast<size_t>(firstRow * c.rowElements[t] + i);
        double want = 0;
        for (int r = 0; r < c.ranks; ++r)
          want += static_cast<double>(valueOf(r, t, src)) * c.prescale;
        if (c.op == ReduceOp::Average) want /= c.ranks;
        ASSERT_EQ(getValue(out.data(), c.dtype, static_cast<size_t>(i)), want)
            << "tensor " << t << " element " << i << " (input element " << src << ")";
      }
      // The caller's input is never modified.
      for (size_t i = 0; i < static_cast<size_t>(c.dim0[t] * c.rowElements[t]); ++i) {
        ASSERT_EQ(getValue(locals[t]->bytes.data(), c.dtype, i),
                  static_cast<double>(valueOf(rank, t, i)));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OpsReducescatter,
    ::testing::Values(
        ReducescatterCase{
            "Ranks2_OneTensor_OddRows_Int32", 2, DataType::Int32, ReduceOp::Sum, {7}, {3}},
        ReducescatterCase{"Ranks3_OneTensor_Prescaled_Float64",
                          3,
                          DataType::Float64,
                          ReduceOp::Sum,
                          {8},
                          {2},
                          2.0},
        ReducescatterCase{"Ranks3_ThreeTensors_Uneven_Float32",
                          3,
                          DataType::Float32,
                          ReduceOp::Sum,
                          {7, 5, 1},
                          {2, 3, 4}},
        ReducescatterCase{"Ranks4_FourTensors_FewerRowsThanRanks_Int64",
                          4,
                          DataType::Int64,
                          ReduceOp::Sum,
                          {3, 9, 2, 6},
                          {1, 2, 5, 3}},
        ReducescatterCase{"Ranks4_TwoTensors_Average_Float32",
                          4,
                          DataType::Float32,
                          ReduceOp::Average,
                          {10, 5},
                          {2, 1}}),
    [](const ::testing::TestParamInfo<ReducescatterCase>& info) { return info.param.name; });

// ---- alltoall with uneven splits ---------------------------------------------------------

struct AlltoallCase {
  std::string name;
  int ranks;
  DataType dtype;
  int64_t rowElements;
  std::function<int32_t(int from, int to)> splits;
  int64_t unsentRows;  // rows past the splits that stay behind
};

void PrintTo(const AlltoallCase& c, std::ostream* os) { *os << c.name; }

class OpsAlltoall : public ::testing::TestWithParam<AlltoallCase> {};

TEST_P(OpsAlltoall, EachRankReceivesItsRowsFromEveryRank) {
  const AlltoallCase& c = GetParam();
  auto dim0Of = [&](int rank) {
    int64_t rows = c.unsentRows;
    for (int j = 0; j < c.ranks; ++j) rows += c.splits(rank, j);
    return rows;
  };
  auto requestsOf = [&](int rank) {
    Request q;
    q.kind = OpKind::Alltoall;
    q.name = tensorName(0);
    q.dtype = c.dtype;
    q.rank = rank;
    q.shape = {dim0Of(rank), c.rowElements};
    for (int j = 0; j < c.ranks; ++j) q.splits.push_back(c.splits(rank, j));
    return std::vector<Request>{q};
  };
  auto plan = negotiate(c.ranks, 1, requestsOf, 1 << 20);
  ASSERT_EQ(plan.size(), 1u);

  runRanks(c.ranks, [&](int rank, Communicator& comm) {
    std::vector<std::unique_ptr<Local>> locals;
    Request q = requestsOf(rank).front();
    locals.push_back(makeLocal(rank, 0, q, q.shape));
    execute(comm, plan, locals);
    const Handle& h = *locals[0]->entry.handle;
    int64_t rows = 0;
    std::vector<int32_t> received;
    for (int j = 0; j < c.ranks; ++j) {
      received.push_back(c.splits(j, rank));
      rows += c.splits(j, rank);
    }
    EXPECT_EQ(h.receivedSplits, received);
    ASSERT_EQ(h.output.shape, (std::vector<int64_t>{rows, c.rowElements}));
    size_t at = 0;
    for (int j = 0; j < c.ranks; ++j) {
      int64_t firstRow = 0;
      for (int k = 0; k < rank; ++k) firstRow += c.splits(j, k);
      for (int64_t i = 0; i < c.splits(j, rank) * c.rowElements; ++i, ++at) {
        size_t src = static_cast<size_t>(firstRow * c.rowElements + i);
        ASSERT_EQ(getValue(h.output.data(), c.dtype, at), static_cast<double>(valueOf(j, 0, src)))
            << "from rank " << j << " element " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OpsAlltoall,
    ::testing::Values(
        AlltoallCase{"Ranks2_Equal_Float32", 2, DataType::Float32, 3,
                     [](int, int) { return int32_t{2}; }, 0},
        AlltoallCase{"Ranks3_Uneven_WithZeros_Int32", 3, DataType::Int32, 2,
                     [](int i, int j) { return static_cast<int32_t>((i + 2 * j) % 3); }, 0},
        AlltoallCase{"Ranks4_Uneven_UnsentRows_Float64", 4, DataType::Float64, 1,
                     [](int i, int j) { return static_cast<int32_t>(1 + (i * j) % 4); }, 2}),
    [](const ::testing::TestParamInfo<AlltoallCase>& info) { return info.param.name; });

// ---- fused allreduce across a fusion boundary --------------------------------------------

struct AllreduceCase {
  std::string name;
  int ranks;
  DataType dtype;
  ReduceOp op;
  std::vector<int64_t> elements;            // per tensor
  int64_t thresholdElements;                // fusion threshold, in elements of dtype
  std::vector<std::vector<size_t>> groups;  // the fused groups the planner must form
};

void PrintTo(const AllreduceCase& c, std::ostream* os) { *os << c.name; }

class OpsAllreduceFusion : public ::testing::TestWithParam<AllreduceCase> {};

TEST_P(OpsAllreduceFusion, GroupsFillTheBufferAndEveryTensorIsReduced) {
  const AllreduceCase& c = GetParam();
  const size_t tensors = c.elements.size();
  auto requestsOf = [&](int rank) {
    std::vector<Request> out;
    for (size_t t = 0; t < tensors; ++t) {
      Request q;
      q.kind = OpKind::Allreduce;
      q.name = tensorName(t);
      q.dtype = c.dtype;
      q.reduceOp = c.op;
      q.rank = rank;
      q.shape = {c.elements[t]};
      out.push_back(q);
    }
    return out;
  };
  const int64_t threshold = c.thresholdElements * static_cast<int64_t>(dtypeSize(c.dtype));
  auto plan = negotiate(c.ranks, tensors, requestsOf, threshold);
  ASSERT_EQ(plan.size(), c.groups.size());
  for (size_t g = 0; g < c.groups.size(); ++g) {
    std::vector<std::string> want;
    for (size_t t : c.groups[g]) want.push_back(tensorName(t));
    EXPECT_EQ(namesOf(plan, g), want) << "fused group " << g;
    if (plan[g].tensorCount() > 1) {
      EXPECT_LE(fusionBytes(plan[g], c.ranks), threshold) << "fused group " << g << " overflows";
    }
  }

  runRanks(c.ranks, [&](int rank, Communicator& comm) {
    std::vector<std::unique_ptr<Local>> locals;
    auto reqs = requestsOf(rank);
    for (size_t t = 0; t < tensors; ++t)
      locals.push_back(makeLocal(rank, t, reqs[t], reqs[t].shape));
    execute(comm, plan, locals);
    for (size_t t = 0; t < tensors; ++t) {
      for (size_t i = 0; i < static_cast<size_t>(c.elements[t]); ++i) {
        double want = 0;
        for (int r = 0; r < c.ranks; ++r) want += static_cast<double>(valueOf(r, t, i));
        if (c.op == ReduceOp::Average) want /= c.ranks;
        ASSERT_EQ(getValue(locals[t]->bytes.data(), c.dtype, i), want)
            << "tensor " << t << " element " << i;
      }
      // One guard byte past each tensor: unpacking writes no further.
      ASSERT_EQ(locals[t]->bytes.back(), 0) << "tensor " << t << " overrun";
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Cases, OpsAllreduceFusion,
    ::testing::Values(
        // 5 + 3 + 8 fill 16 exactly; then 1 + 6 + 0 + 7.
        AllreduceCase{"Ranks2_ExactFillThenRest_Float32",
                      2,
                      DataType::Float32,
                      ReduceOp::Sum,
                      {5, 3, 8, 1, 6, 0, 7},
                      16,
                      {{0, 1, 2}, {3, 4, 5, 6}}},
        // 9 and 20 do not fit beside 10; 4 and 2 jump over them and fill 16 exactly.
        AllreduceCase{"Ranks3_LaterTensorsFillTheGap_Int64",
                      3,
                      DataType::Int64,
                      ReduceOp::Sum,
                      {10, 9, 20, 4, 2},
                      16,
                      {{0, 3, 4}, {1}, {2}}},
        AllreduceCase{"Ranks4_ManySmall_Average_Float64",
                      4,
                      DataType::Float64,
                      ReduceOp::Average,
                      {3, 3, 3, 3, 3, 3, 3},
                      9,
                      {{0, 1, 2}, {3, 4, 5}, {6}}}),
    [](const ::testing::TestParamInfo<AllreduceCase>& info) { return info.param.name; });

}  // namespace
}  // namespace hora
