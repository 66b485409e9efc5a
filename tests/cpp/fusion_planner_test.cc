#include <gtest/gtest.h>

#include "core/fusion/fusion_planner.h"

namespace hora {
namespace {

Response allreduce(const std::string& name, int64_t elements, DataType dtype = DataType::Float32) {
  Response r;
  r.kind = OpKind::Allreduce;
  r.names = {name};
  r.dtype = dtype;
  r.elementCounts = {elements};
  r.cacheSlots = {-1};
  return r;
}

auto oneSet = [](int) { return 2; };

TEST(FusionPlanner, FusesCompatibleUpToThreshold) {
  std::vector<Response> in = {allreduce("a", 10), allreduce("b", 10), allreduce("c", 10)};
  auto out = planFusion(in, 80, oneSet);  // 40 bytes each: two fit
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(out[0].elementCounts, (std::vector<int64_t>{10, 10}));
  EXPECT_EQ(out[0].cacheSlots.size(), 2u);
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"c"}));
}

TEST(FusionPlanner, ZeroThresholdDisablesFusion) {
  auto out = planFusion({allreduce("a", 1), allreduce("b", 1)}, 0, oneSet);
  EXPECT_EQ(out.size(), 2u);
}

TEST(FusionPlanner, NeverMixesDtypeOpScaleOrSet) {
  Response b = allreduce("b", 1, DataType::Float64);
  Response c = allreduce("c", 1);
  c.reduceOp = ReduceOp::Max;
  Response d = allreduce("d", 1);
  d.prescale = 2.0;
  Response e = allreduce("e", 1);
  e.processSetId = 1;
  Response f = allreduce("f", 1);
  auto out = planFusion({allreduce("a", 1), b, c, d, e, f}, 1 << 20, oneSet);
  ASSERT_EQ(out.size(), 5u);
  // f jumps over the incompatible ones to join a; the group keeps a's position.
  EXPECT_EQ(out[0].names, (std::vector<std::string>{"a", "f"}));
  EXPECT_EQ(out[1].names, (std::vector<std::string>{"b"}));
  EXPECT_EQ(out[4].names, (std::vector<std::string>{"e"}));
}

TEST(FusionPlanner, PlansInPlaceResponsesAsItPlansCopies) {
  Response b = allreduce("b", 1, DataType::Float64);
  Response big = allreduce("big", 1000);
  std::vector<Response> in = {allreduce("a", 10), b, big, allreduce("c", 10), allreduce("d", 20)};
  std::vector<const Response*> pointers;
  for (const Response& r : in) pointers.push_back(&r);
  for (int64_t threshold : {0, 80, 1 << 20}) {
    auto copied = planFusion(in, threshold, oneSet);
    auto inPlace = planFusion(pointers, threshold, oneSet);
    ASSERT_EQ(inPlace.size(), copied.size()) << threshold;
    for (size_t i = 0; i < copied.size(); ++i) {
      EXPECT_EQ(inPlace[i].names, copied[i].names) << threshold;
      EXPECT_EQ(inPlace[i].elementCounts, copied[i].elementCounts) << threshold;
      EXPECT_EQ(inPlace[i].cacheSlots, copied[i].cacheSlots) << threshold;
      EXPECT_EQ(inPlace[i].dtype, copied[i].dtype) << threshold;
    }
  }
  EXPECT_EQ(in[0].names, (std::vector<std::string>{"a"}));  // the singles are left as they were
  EXPECT_EQ(planFusion(pointers, 80, oneSet)[0].names, (std::vector<std::string>{"a", "c"}));
}

TEST(FusionPlanner, LargeTensorRunsAloneAndBroadcastNeverFuses) {
  Response big = allreduce("big", 1000);
  Response b1;
  b1.kind = OpKind::Broadcast;
  b1.names = {"x"};
  Response b2 = b1;
  b2.names = {"y"};
  auto out = planFusion({big, allreduce("s", 1), b1, b2}, 100, oneSet);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].names.size(), 1u);
}

TEST(FusionPlanner, AllgatherBytesCountEveryRank) {
  Response g;
  g.kind = OpKind::Allgather;
  g.names = {"g"};
  g.dtype = DataType::Float32;
  g.gatheredRows = {3, 5};  // dim0 on rank 0 and rank 1
  g.rowElements = {2};
  EXPECT_EQ(fusionBytes(g, 2), (3 + 5) * 2 * 4);
  Response h = g;
  h.names = {"h"};
  auto out = planFusion({g, h}, 1 << 10, oneSet);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].gatheredRows, (std::vector<int64_t>{3, 5, 3, 5}));
  EXPECT_EQ(out[0].rowElements, (std::vector<int64_t>{2, 2}));
}

TEST(FusionPlanner, SingleResponseIntoAReusedResponseEqualsAFreshOne) {
  Response g;
  g.kind = OpKind::Allgather;
  g.names = {"g", "h"};
  g.dtype = DataType::Int64;
  g.gatheredRows = {3, 5, 7, 9};
  g.rowElements = {2, 4};
  g.cacheSlots = {6, 8};
  Response reused = allreduce("a much longer name than either of the others", 99);
  reused.splitsMatrix = {1, 2, 3, 4};
  reused.processSet.ranks = {0, 1};
  reused.lastJoinedRank = 1;
  reused.errorCode = ResponseError::Mismatch;
  reused.errorMessage = "stale";
  singleResponseInto(g, 1, 2, &reused);
  Response fresh = singleResponse(g, 1, 2);
  EXPECT_EQ(reused.kind, OpKind::Allgather);
  EXPECT_EQ(reused.names, (std::vector<std::string>{"h"}));
  EXPECT_EQ(reused.dtype, DataType::Int64);
  EXPECT_EQ(reused.gatheredRows, (std::vector<int64_t>{7, 9}));
  EXPECT_EQ(reused.rowElements, (std::vector<int64_t>{4}));
  EXPECT_EQ(reused.cacheSlots, (std::vector<int32_t>{8}));
  EXPECT_TRUE(reused.elementCounts.empty());
  EXPECT_TRUE(reused.splitsMatrix.empty());
  EXPECT_EQ(reused.processSet, ProcessSetChange());
  EXPECT_EQ(reused.lastJoinedRank, -1);
  EXPECT_EQ(reused.errorCode, ResponseError::None);
  EXPECT_TRUE(reused.errorMessage.empty());
  EXPECT_EQ(fresh.names, reused.names);
  EXPECT_EQ(fresh.gatheredRows, reused.gatheredRows);
  EXPECT_EQ(fresh.cacheSlots, reused.cacheSlots);
}

}  // namespace
}  // namespace hora
