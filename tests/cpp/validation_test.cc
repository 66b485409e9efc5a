// checkAgreement: one named case per parameter the ranks must agree on, each breaking agreement in
// exactly that parameter on one rank, and the runnable checks that follow agreement.
#include <gtest/gtest.h>

#include <functional>
#include <ostream>

#include "core/coordinator/response_builder.h"

namespace hora {
namespace {

struct AgreementCase {
  std::string name;
  OpKind kind;
  std::function<void(Request&)> differ;  // applied to the last rank's request only
  std::string what;                      // expected in the message
};

void PrintTo(const AgreementCase& c, std::ostream* os) { *os << c.name; }

Request base(OpKind kind, int rank) {
  Request r;
  r.kind = kind;
  r.name = "x";
  r.rank = rank;
  r.shape = {4, 2};
  if (kind == OpKind::Alltoall) r.splits = {2, 1, 1};
  if (kind == OpKind::AddProcessSet) r.processSet.ranks = {0, 1};
  return r;
}

NegotiationInput inputOf(const std::vector<Request>& reqs) {
  NegotiationInput in;
  in.requests = &reqs;
  for (size_t i = 0; i < reqs.size(); ++i) in.setRanks.push_back(static_cast<int>(i));
  in.setSize = static_cast<int>(reqs.size());
  return in;
}

class Agreement : public ::testing::TestWithParam<AgreementCase> {};

TEST_P(Agreement, OneRankDifferingIsAMismatchNamingEveryRank) {
  const AgreementCase& c = GetParam();
  std::vector<Request> reqs = {base(c.kind, 0), base(c.kind, 1), base(c.kind, 2)};
  ASSERT_FALSE(checkAgreement(inputOf(reqs)).has_value()) << "identical requests agree";
  c.differ(reqs.back());
  auto error = checkAgreement(inputOf(reqs));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->kind, OpKind::Error);
  EXPECT_EQ(error->errorCode, ResponseError::Mismatch);
  EXPECT_EQ(error->names, (std::vector<std::string>{"x"}));
  EXPECT_NE(error->errorMessage.find("Mismatched " + c.what + " for tensor 'x'"), std::string::npos)
      << error->errorMessage;
  for (int r = 0; r < 3; ++r) {
    EXPECT_NE(error->errorMessage.find("rank " + std::to_string(r) + ": "), std::string::npos);
  }
  EXPECT_EQ(negotiateResponse(inputOf(reqs)).kind, OpKind::Error);
}

INSTANTIATE_TEST_SUITE_P(
    Rules, Agreement,
    ::testing::Values(
        AgreementCase{"Operation", OpKind::Allreduce,
                      [](Request& r) { r.kind = OpKind::Broadcast; }, "operations"},
        AgreementCase{"Dtype", OpKind::Allreduce, [](Request& r) { r.dtype = DataType::Int32; },
                      "data types"},
        AgreementCase{"Device", OpKind::Allreduce, [](Request& r) { r.device = 0; },
                      "ALLREDUCE CPU/GPU device selection"},
        AgreementCase{"AllreduceShape", OpKind::Allreduce,
                      [](Request& r) {
                        r.shape = {4, 3};
                      },
                      "ALLREDUCE tensor shapes"},
        AgreementCase{"ReducescatterFirstDim", OpKind::Reducescatter,
                      [](Request& r) {
                        r.shape = {5, 2};
                      },
                      "REDUCESCATTER tensor shapes"},
        AgreementCase{"AllgatherTrailingDim", OpKind::Allgather,
                      [](Request& r) {
                        r.shape = {4, 3};
                      },
                      "ALLGATHER tensor shapes (all dimensions but the first must match)"},
        AgreementCase{"AllgatherRankOfShape", OpKind::Allgather, [](Request& r) { r.shape = {8}; },
                      "ALLGATHER tensor shapes (all dimensions but the first must match)"},
        AgreementCase{"ReduceOp", OpKind::Allreduce, [](Request& r) { r.reduceOp = ReduceOp::Max; },
                      "reduction operations"},
        AgreementCase{"Prescale", OpKind::Allreduce, [](Request& r) { r.prescale = 2; },
                      "prescale factors"},
        AgreementCase{"Postscale", OpKind::Reducescatter, [](Request& r) { r.postscale = 0.5; },
                      "postscale factors"},
        AgreementCase{"BroadcastRoot", OpKind::Broadcast, [](Request& r) { r.rootRank = 1; },
                      "BROADCAST root ranks"},
        AgreementCase{"ProcessSetRanks", OpKind::AddProcessSet,
                      [](Request& r) {
                        r.processSet.ranks = {0, 2};
                      },
                      "process set arguments"}),
    [](const ::testing::TestParamInfo<AgreementCase>& info) { return info.param.name; });

TEST(Agreement, FirstDimensionMayDifferForAllgatherAndAlltoall) {
  for (OpKind kind : {OpKind::Allgather, OpKind::Alltoall}) {
    std::vector<Request> reqs = {base(kind, 0), base(kind, 1), base(kind, 2)};
    reqs[1].shape = {9, 2};
    EXPECT_FALSE(checkAgreement(inputOf(reqs)).has_value()) << opKindName(kind);
  }
}

TEST(Agreement, AgreedButNotRunnableIsAnInvalidArgument) {
  std::vector<Request> adasum = {base(OpKind::Adasum, 0), base(OpKind::Adasum, 1),
                                 base(OpKind::Adasum, 2)};
  auto error = checkAgreement(inputOf(adasum));
  ASSERT_TRUE(error.has_value());
  EXPECT_EQ(error->errorCode, ResponseError::InvalidArgument);

  std::vector<Request> gather = {base(OpKind::Allgather, 0), base(OpKind::Allgather, 1)};
  NegotiationInput joined = inputOf(gather);
  joined.someRanksJoined = true;
  error = checkAgreement(joined);
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->errorMessage.find("Allgather is not supported with Join"), std::string::npos);

  std::vector<Request> a2a = {base(OpKind::Alltoall, 0), base(OpKind::Alltoall, 1)};  // 3 splits
  error = checkAgreement(inputOf(a2a));
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->errorMessage.find("Number of entries in splits"), std::string::npos);
}

TEST(BuildResponse, CarriesWhatEachKindNeeds) {
  std::vector<Request> gather = {base(OpKind::Allgather, 0), base(OpKind::Allgather, 1)};
  gather[1].shape = {7, 2};
  Response g = negotiateResponse(inputOf(gather));
  EXPECT_EQ(g.gatheredRows, (std::vector<int64_t>{4, 7}));
  EXPECT_EQ(g.rowElements, (std::vector<int64_t>{2}));

  std::vector<Request> a2a = {base(OpKind::Alltoall, 0), base(OpKind::Alltoall, 1),
                              base(OpKind::Alltoall, 2)};
  a2a[2].splits = {0, 3, 1};
  Response t = negotiateResponse(inputOf(a2a));
  EXPECT_EQ(t.splitsMatrix, (std::vector<int64_t>{2, 1, 1, 2, 1, 1, 0, 3, 1}));

  std::vector<Request> rs = {base(OpKind::Reducescatter, 0), base(OpKind::Reducescatter, 1)};
  Response s = negotiateResponse(inputOf(rs));
  EXPECT_EQ(s.elementCounts, (std::vector<int64_t>{8}));
  EXPECT_EQ(s.rowElements, (std::vector<int64_t>{2}));

  std::vector<Request> add = {base(OpKind::AddProcessSet, 0), base(OpKind::AddProcessSet, 1)};
  Response p = negotiateResponse(inputOf(add));
  EXPECT_EQ(p.processSet.ranks, (std::vector<int32_t>{0, 1}));
}

}  // namespace
}  // namespace hora
