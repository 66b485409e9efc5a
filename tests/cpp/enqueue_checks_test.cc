// The enqueue checks' refusals: each failing check raises its own error (InvalidArgument, or
// InvalidCollectiveError where Horovod raises HorovodInternalError) with its own message (built
// only when the check fails), and a request that passes every check is completed.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/common/errors.h"
#include "core/coordinator/enqueue_checks.h"
#include "core/coordinator/process_set_table.h"

namespace hora {
namespace {

class EnqueueChecks : public ::testing::Test {
 protected:
  EnqueueChecks() : sets_(1) {
    sets_.add(0, {0, 1, 2}, nullptr);
    sets_.add(5, {0, 2}, nullptr);  // rank 1 is not a member
  }

  OpRequest request(OpKind kind, std::vector<int64_t> shape = {4}) {
    OpRequest op;
    op.request.kind = kind;
    op.request.name = "t";
    op.tensor.data = data_.data();
    op.tensor.dtype = DataType::Float32;
    op.tensor.shape = std::move(shape);
    return op;
  }

  // The message of the error the checks raise, or "" when they pass.
  std::string refusal(OpRequest op) { return refusalOf(std::move(op)).second; }

  // The code and the message of the error the checks raise (message "" when they pass).
  std::pair<ErrorCode, std::string> refusalOf(OpRequest op) {
    try {
      checkAndCompleteRequest(op, 1, sets_, Capabilities::cpuComplete());
    } catch (const Error& e) {
      return {e.code(), e.what()};
    }
    return {ErrorCode::Internal, ""};
  }

  ProcessSetTable sets_;
  std::vector<float> data_ = std::vector<float>(8, 1.0f);
};

TEST_F(EnqueueChecks, APassingRequestIsCompleted) {
  OpRequest op = request(OpKind::Allreduce, {2, 3});
  op.request.reduceOp = ReduceOp::Adasum;
  checkAndCompleteRequest(op, 1, sets_, Capabilities::cpuComplete());
  EXPECT_EQ(op.request.kind, OpKind::Adasum);
  EXPECT_EQ(op.request.rank, 1);
  EXPECT_EQ(op.request.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(op.request.dtype, DataType::Float32);

  OpRequest a2a = request(OpKind::Alltoall, {6});
  checkAndCompleteRequest(a2a, 1, sets_, Capabilities::cpuComplete());
  EXPECT_EQ(a2a.request.splits, (std::vector<int32_t>{2, 2, 2}));
}

TEST_F(EnqueueChecks, EachRefusalNamesItsReason) {
  OpRequest unnamed = request(OpKind::Allreduce);
  unnamed.request.name = "";
  EXPECT_EQ(refusal(unnamed), "every tensor needs a name");

  OpRequest unknownSet = request(OpKind::Allreduce);
  unknownSet.request.processSetId = 9;
  EXPECT_EQ(refusal(unknownSet),
            "allreduce: the process set (id 9) of tensor 't' is not registered; pass it to "
            "hora.init(process_sets=[...]) or hora.add_process_set() first");

  OpRequest unregistered = request(OpKind::Allreduce);
  unregistered.request.processSetId = -1;  // what a frontend passes for a set without an id
  EXPECT_EQ(refusal(unregistered),
            "allreduce: the process set of tensor 't' is not registered; pass it to "
            "hora.init(process_sets=[...]) or hora.add_process_set() first");

  OpRequest unknownOp = request(OpKind::Allreduce);
  unknownOp.request.reduceOp = static_cast<ReduceOp>(17);
  EXPECT_EQ(refusal(unknownOp), "allreduce: unknown reduce op 17");

  OpRequest foreign = request(OpKind::Allreduce);
  foreign.request.processSetId = 5;
  EXPECT_EQ(refusal(foreign),
            "allreduce: Rank 1 is not a member of the provided process set. (tensor 't')");

  EXPECT_EQ(refusal(request(OpKind::Allreduce, {2, -1})), "tensor 't' has a negative dimension");

  OpRequest noData = request(OpKind::Allreduce);
  noData.tensor.data = nullptr;
  EXPECT_EQ(refusal(noData), "tensor 't' has no data");

  EXPECT_EQ(refusal(request(OpKind::Allgather, {})),
            "allgather needs a tensor of at least one dimension; reshape the scalar to [1] "
            "(tensor 't')");

  OpRequest minScatter = request(OpKind::Reducescatter);
  minScatter.request.reduceOp = ReduceOp::Min;
  EXPECT_EQ(refusalOf(minScatter),
            std::make_pair(ErrorCode::InvalidCollective,
                           std::string("Reducescatter currently only supports AVERAGE and SUM.")));

  OpRequest intAdasum = request(OpKind::Adasum);
  intAdasum.tensor.dtype = DataType::Int32;
  EXPECT_EQ(refusal(intAdasum), "Adasum supports floating-point tensors only; 't' is int32");

  OpRequest badRoot = request(OpKind::Broadcast);
  badRoot.request.rootRank = 7;
  EXPECT_EQ(refusal(badRoot),
            "broadcast received invalid root rank 7 for provided process set (tensor 't')");

  EXPECT_EQ(refusalOf(request(OpKind::Alltoall, {4})),
            std::make_pair(ErrorCode::InvalidCollective,
                           std::string("alltoall without splits needs the first dimension (4) to "
                                       "be divisible by the number of workers (3); pass splits "
                                       "otherwise (tensor 't')")));

  OpRequest shortSplits = request(OpKind::Alltoall, {4});
  shortSplits.request.splits = {1, 1};
  EXPECT_EQ(refusalOf(shortSplits),
            std::make_pair(ErrorCode::InvalidCollective,
                           std::string("Number of entries in splits does not equal number of "
                                       "workers. (tensor 't': 2 splits, 3 workers)")));

  OpRequest negativeSplit = request(OpKind::Alltoall, {4});
  negativeSplit.request.splits = {1, -1, 1};
  EXPECT_EQ(refusal(negativeSplit), "alltoall splits of 't' must not be negative");

  OpRequest tooMany = request(OpKind::Alltoall, {4});
  tooMany.request.splits = {2, 2, 2};
  EXPECT_EQ(refusalOf(tooMany),
            std::make_pair(ErrorCode::InvalidCollective,
                           std::string("Sum of splits entries is greater than the first dimension "
                                       "of tensor. (tensor 't': 6 rows, first dimension 4)")));
}

}  // namespace
}  // namespace hora
