// Device and Communicator capabilities: what a backend declares, and the enqueue checks that
// consult it before a request reaches the backend.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/coordinator/enqueue_checks.h"
#include "core/coordinator/process_set_table.h"
#include "core/store/memory_store.h"
#include "core/transport/transport.h"
#include "tests/cpp/connect_options.h"
#include "tests/cpp/spawn.h"

namespace hora {
namespace {

TEST(Device, CodeRoundTripsAndNames) {
  EXPECT_EQ(Device::cpu().code(), -1);
  EXPECT_EQ(Device::cuda(3).code(), 3);
  EXPECT_EQ(Device::fromCode(-1), Device::cpu());
  EXPECT_EQ(Device::fromCode(2), Device::cuda(2));
  EXPECT_NE(Device::cuda(0), Device::cuda(1));
  EXPECT_NE(Device::cuda(0), Device::cpu());
  EXPECT_EQ(Device::cuda(1).name(), "GPU 1");
  EXPECT_EQ(Device::cpu().name(), "CPU");
}

TEST(Capabilities, CpuCompleteIsTheWholeContractOnHostMemory) {
  Capabilities c = Capabilities::cpuComplete();
  EXPECT_TRUE(c.accepts(Device::cpu()));
  EXPECT_FALSE(c.accepts(Device::cuda(0)));
  EXPECT_TRUE(c.subsets);
  for (int i = 0; i < kNumCollectiveOps; ++i) EXPECT_TRUE(c.supports(static_cast<CollectiveOp>(i)));
  for (int i = 0; i < kNumDataTypes; ++i) EXPECT_TRUE(c.carries(static_cast<DataType>(i)));
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
    EXPECT_TRUE(c.reduces(op)) << reduceOpName(op);
  }
  EXPECT_FALSE(c.reduces(ReduceOp::Average));
  EXPECT_FALSE(c.reduces(ReduceOp::Adasum));
  EXPECT_FALSE(c.reduces(static_cast<ReduceOp>(200)));
}

TEST(Capabilities, TcpCommunicatorDeclaresHostMemoryOnly) {
  MemoryStore store;
  test::spawnRanks(2, [&](int rank) {
    ConnectOptions o = test::loopbackOptions(rank, 2, "capabilities-test", Millis(20000));
    Connection conn = makeTransport("tcp")->connect(o, store);
    Capabilities c = conn.world->capabilities();
    EXPECT_TRUE(c.accepts(Device::cpu()));
    EXPECT_FALSE(c.accepts(Device::cuda(0)));
    EXPECT_TRUE(c.reduces(ReduceOp::Sum));
    EXPECT_FALSE(c.reduces(ReduceOp::Average));
    // A reduction the backend does not declare is refused before anything is sent.
    float x = 1;
    EXPECT_THROW(conn.world->allreduce(&x, 1, DataType::Float32, ReduceOp::Average),
                 InvalidArgument);
    conn.world->allreduce(&x, 1, DataType::Float32, ReduceOp::Sum);
    EXPECT_EQ(x, 2.0f);
  });
}

OpRequest requestOn(Device device, std::vector<float>& v) {
  OpRequest op;
  op.request.kind = OpKind::Allreduce;
  op.request.name = "t";
  op.tensor.data = v.data();
  op.tensor.dtype = DataType::Float32;
  op.tensor.shape = {static_cast<int64_t>(v.size())};
  op.tensor.device = device;
  return op;
}

TEST(Capabilities, EnqueueRefusesADeviceTheTransportDoesNotTake) {
  ProcessSetTable sets(0);
  sets.add(0, {0}, nullptr);
  std::vector<float> v(4, 1.0f);
  Capabilities cpuOnly = Capabilities::cpuComplete();

  OpRequest onCpu = requestOn(Device::cpu(), v);
  checkAndCompleteRequest(onCpu, 0, sets, cpuOnly);
  EXPECT_EQ(onCpu.request.device, -1);

  OpRequest onGpu = requestOn(Device::cuda(1), v);
  try {
    checkAndCompleteRequest(onGpu, 0, sets, cpuOnly);
    FAIL() << "a GPU tensor passed the checks of a CPU-only transport";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("GPU 1"), std::string::npos) << e.what();
  }

  Capabilities withCuda = cpuOnly;
  withCuda.cudaMemory = true;
  OpRequest onGpuAgain = requestOn(Device::cuda(1), v);
  checkAndCompleteRequest(onGpuAgain, 0, sets, withCuda);
  EXPECT_EQ(onGpuAgain.request.device, 1);
}

// Limits as the GPU backend states them, with texts of its own so the test sees them used.
Capabilities deviceLimits() {
  Capabilities c;
  c.hostMemory = false;
  c.cudaMemory = true;
  c.deviceCount = 2;
  c.adasum = false;
  c.scaleFactors = false;
  c.scaleFactorsHierarchical = true;
  c.reducibleDtypes.reset();
  c.reducibleDtypes.set(static_cast<size_t>(DataType::Float32));
  c.reducer = "Reducer (1.2)";
  c.reducibleHint = "float32 only";
  return c;
}

// The message of what `op` throws as E, or "" when it throws nothing (other types propagate).
template <typename E>
std::string refusal(OpRequest op, const Capabilities& caps, bool hierarchical = false) {
  ProcessSetTable sets(0);
  sets.add(0, {0}, nullptr);
  try {
    checkAndCompleteRequest(op, 0, sets, caps, hierarchical);
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

TEST(Capabilities, EnqueueRefusesWhatTheDeviceBackendCannotRun) {
  std::vector<float> v(4, 1.0f);
  const Capabilities caps = deviceLimits();
  EXPECT_EQ(refusal<InvalidArgument>(requestOn(Device::cuda(1), v), caps), "");

  Capabilities off = caps;
  off.offReason = "no usable device";
  EXPECT_EQ(refusal<InvalidArgument>(requestOn(Device::cuda(1), v), off),
            "tensor 't' is on GPU 1, but the GPU path of Hora is off: no usable device");
  EXPECT_EQ(refusal<InvalidArgument>(requestOn(Device::cuda(2), v), caps),
            "tensor 't' is on GPU 2, but CUDA reports 2 devices");

  OpRequest adasum = requestOn(Device::cuda(0), v);
  adasum.request.reduceOp = ReduceOp::Adasum;
  EXPECT_EQ(refusal<NotSupported>(adasum, caps),
            "tensor 't' is on GPU 0: Adasum is not supported for GPU tensors; reduce a CPU copy");

  std::vector<int16_t> shorts(4, 1);
  OpRequest int16 = requestOn(Device::cuda(0), v);
  int16.tensor.data = shorts.data();
  int16.tensor.dtype = DataType::Int16;
  EXPECT_EQ(refusal<NotSupported>(int16, caps),
            "tensor 't' is on GPU 0: Reducer (1.2) cannot reduce int16 tensors: cast them to a "
            "type it reduces (float32 only), or reduce a CPU copy");
  int16.request.kind = OpKind::Allgather;  // moves bytes: no reduction, no limit
  EXPECT_EQ(refusal<NotSupported>(int16, caps), "");
}

TEST(Capabilities, EnqueueRefusesDeviceScaleFactorsOutsideTheHierarchicalAllreduce) {
  std::vector<float> v(4, 1.0f);
  const Capabilities caps = deviceLimits();
  OpRequest scaled = requestOn(Device::cuda(0), v);
  scaled.request.postscale = 0.5;
  const std::string refused =
      "tensor 't' is on GPU 0: prescale and postscale factors are not supported for GPU tensors "
      "(except in the hierarchical allreduce); scale the tensor before or after the call";
  EXPECT_EQ(refusal<NotSupported>(scaled, caps), refused);
  EXPECT_EQ(refusal<NotSupported>(scaled, caps, /*hierarchical=*/true), "");

  // The hierarchical exception is the allreduce's only.
  OpRequest scatter = scaled;
  scatter.request.kind = OpKind::Reducescatter;
  EXPECT_EQ(refusal<NotSupported>(scatter, caps, /*hierarchical=*/true), refused);

  // A CPU tensor never meets the device limits.
  OpRequest onCpu = requestOn(Device::cpu(), v);
  onCpu.request.postscale = 0.5;
  EXPECT_EQ(refusal<NotSupported>(onCpu, Capabilities::cpuComplete()), "");
}

}  // namespace
}  // namespace hora
