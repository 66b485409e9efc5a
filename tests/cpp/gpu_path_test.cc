// The run-time loading of NCCL and the CUDA runtime, version gates, and NcclCommunicator at one
// rank, against the CPU emulation (tests/gpu_emulation; its path comes from CMake).
#include <gtest/gtest.h>

#include <climits>
#include <cstddef>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "core/common/errors.h"
#include "core/transport/nccl/communicator.h"
#include "core/transport/nccl/gpu_library.h"

namespace hora::gpu {
namespace {

// Sets an environment variable for one scope, then restores it.
class EnvScope {
 public:
  EnvScope(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value.c_str(), 1);
  }
  ~EnvScope() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

struct Emulation {
  EnvScope nccl{"HORA_NCCL_LIBRARY", HORA_GPU_EMULATION_PATH};
  EnvScope cuda{"HORA_CUDA_LIBRARY", HORA_GPU_EMULATION_PATH};
};

TEST(GpuLibrary, VersionStrings) {
  EXPECT_EQ(ncclVersionString(21003), "NCCL 2.10.3");
  EXPECT_EQ(ncclVersionString(23203), "NCCL 2.32.3");
  EXPECT_EQ(ncclVersionString(2708), "NCCL 2.7.8");
}

TEST(GpuLibrary, AMissingLibraryTurnsThePathOffNamingIt) {
  EnvScope nccl("HORA_NCCL_LIBRARY", "/nonexistent/libnccl.so.2");
  GpuLibrary lib = GpuLibrary::load();
  EXPECT_FALSE(lib.available());
  EXPECT_FALSE(lib.ncclLoaded());
  EXPECT_NE(lib.reason().find("HORA_NCCL_LIBRARY"), std::string::npos) << lib.reason();

  Emulation emu;
  EnvScope cuda("HORA_CUDA_LIBRARY", "/nonexistent/libcudart.so.12");
  GpuLibrary noRuntime = GpuLibrary::load();
  EXPECT_TRUE(noRuntime.ncclLoaded());
  EXPECT_FALSE(noRuntime.available());
  EXPECT_NE(noRuntime.reason().find("CUDA runtime is not available"), std::string::npos);
}

TEST(GpuLibrary, EmulationLoadsAndVersionsGateFeatures) {
  Emulation emu;
  GpuLibrary lib = GpuLibrary::load();
  ASSERT_TRUE(lib.available()) << lib.reason();
  EXPECT_EQ(lib.ncclVersion(), 22303);
  EXPECT_EQ(lib.deviceCount(), 8);
  int type = -1;
  EXPECT_TRUE(ncclTypeOf(DataType::BFloat16, lib, &type));
  EXPECT_EQ(type, ncclBfloat16);
  EXPECT_FALSE(ncclTypeOf(DataType::Int16, lib, &type));
  Capabilities caps = NcclCommunicator::gpuCapabilities(lib);
  EXPECT_TRUE(caps.accepts(Device::cuda(0)));
  EXPECT_FALSE(caps.accepts(Device::cpu()));
  EXPECT_TRUE(caps.carries(DataType::BFloat16));
  EXPECT_FALSE(caps.carries(DataType::Bool));

  {
    EnvScope old("HORA_EMU_NCCL_VERSION", "20905");
    GpuLibrary before210 = GpuLibrary::load();
    ASSERT_TRUE(before210.available());
    EXPECT_FALSE(before210.supportsBfloat16());
    EXPECT_FALSE(ncclTypeOf(DataType::BFloat16, before210, &type));
  }
  {
    EnvScope tooOld("HORA_EMU_NCCL_VERSION", "20603");
    GpuLibrary before27 = GpuLibrary::load();
    EXPECT_FALSE(before27.available());
    EXPECT_NE(before27.reason().find("older than 2.7"), std::string::npos) << before27.reason();
  }
  EnvScope noDevice("HORA_EMU_DEVICE_COUNT", "0");
  GpuLibrary driverless = GpuLibrary::load();
  EXPECT_FALSE(driverless.available());
  EXPECT_NE(driverless.reason().find("no usable CUDA device"), std::string::npos);
}

// The limits the enqueue checks apply to GPU requests, as the backend states them.
TEST(GpuLibrary, CapabilitiesStateTheGpuPathsLimits) {
  Emulation emu;
  GpuLibrary lib = GpuLibrary::load();
  ASSERT_TRUE(lib.available()) << lib.reason();
  Capabilities caps = NcclCommunicator::gpuCapabilities(lib);
  EXPECT_EQ(caps.offReason, "");
  EXPECT_EQ(caps.deviceCount, 8);
  EXPECT_FALSE(caps.adasum);
  EXPECT_FALSE(caps.scaleFactors);
  EXPECT_TRUE(caps.scaleFactorsHierarchical);
  EXPECT_EQ(caps.reducer, "NCCL (NCCL 2.23.3)");
  for (DataType t : {DataType::Int16, DataType::UInt16, DataType::Bool}) {
    EXPECT_FALSE(caps.reducesDtype(t)) << dtypeName(t);
  }
  for (DataType t : {DataType::Float32, DataType::Float16, DataType::Int32, DataType::BFloat16}) {
    EXPECT_TRUE(caps.reducesDtype(t)) << dtypeName(t);
  }
  {
    EnvScope before210("HORA_EMU_NCCL_VERSION", "20905");
    EXPECT_FALSE(
        NcclCommunicator::gpuCapabilities(GpuLibrary::load()).reducesDtype(DataType::BFloat16));
  }
  EnvScope noDevice("HORA_EMU_DEVICE_COUNT", "0");
  GpuLibrary driverless = GpuLibrary::load();
  Capabilities off = NcclCommunicator::gpuCapabilities(driverless);
  EXPECT_EQ(off.offReason, driverless.reason());
  EXPECT_NE(off.offReason.find("no usable CUDA device"), std::string::npos) << off.offReason;
}

// A world of one: every collective is a copy enqueued on the stream; abort ends the communicator.
TEST(NcclCommunicator, OneRankRunsEveryCollectiveAndAborts) {
  Emulation emu;
  GpuLibrary lib = GpuLibrary::load();
  ASSERT_TRUE(lib.available()) << lib.reason();
  const CudaApi& cuda = lib.cuda();
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cuda.streamCreateWithFlags(&stream, kStreamNonBlocking), cudaSuccess);
  ncclUniqueId id{};
  ASSERT_EQ(lib.nccl().getUniqueId(&id), ncclSuccess);
  NcclCommunicator comm(lib, id, 0, 1, 0, stream);
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.backendName(), "nccl");

  std::vector<float> buf = {1, 2, 3, 4};
  comm.allreduce(buf.data(), buf.size(), DataType::Float32, ReduceOp::Sum);
  std::vector<float> gathered(4, 0);
  comm.allgatherv(buf.data(), gathered.data(), {4 * sizeof(float)});
  std::vector<float> scattered(4, 0);
  comm.reduceScatter(buf.data(), scattered.data(), {4}, DataType::Float32, ReduceOp::Max);
  std::vector<float> exchanged(4, 0);
  comm.alltoallv(buf.data(), {4 * sizeof(float)}, exchanged.data(), {4 * sizeof(float)});
  ASSERT_EQ(cuda.streamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(gathered, buf);
  EXPECT_EQ(scattered, buf);
  EXPECT_EQ(exchanged, buf);
  EXPECT_EQ(comm.asyncError(), ncclSuccess);
  EXPECT_THROW(comm.allreduce(buf.data(), 4, DataType::Int16, ReduceOp::Sum), NotSupported);
  EXPECT_THROW(comm.barrier(), NotSupported);

  comm.abort();
  EXPECT_TRUE(comm.aborted());
  EXPECT_THROW(comm.allreduce(buf.data(), 4, DataType::Float32, ReduceOp::Sum), IoError);
  cuda.streamDestroy(stream);
}

// ncclConfig_t is NCCL 2.14's layout (ncclConfig_v21400 of nccl.h), as NCCL_CONFIG_INITIALIZER
// fills it.
TEST(NcclCommunicator, ConfigHasNcclsLayoutAndInitializer) {
  ncclConfig_t config;
  EXPECT_EQ(offsetof(ncclConfig_t, magic), sizeof(size_t));
  EXPECT_EQ(offsetof(ncclConfig_t, version), sizeof(size_t) + 4);
  EXPECT_EQ(offsetof(ncclConfig_t, blocking), sizeof(size_t) + 8);
  EXPECT_EQ(config.size, sizeof(ncclConfig_t));
  EXPECT_EQ(config.magic, 0xcafebeefu);
  EXPECT_EQ(config.version, 21400u);
  EXPECT_EQ(config.blocking, INT_MIN);
}

// From NCCL 2.14 creation is non-blocking and bounded: a member that never joins ends it in
// TimeoutError at the bound, naming who; before 2.14 the blocking call is taken.
TEST(NcclCommunicator, InitIsNonblockingAndBoundedFromNccl214) {
  Emulation emu;
  GpuLibrary lib = GpuLibrary::load();
  ASSERT_TRUE(lib.available()) << lib.reason();
  EXPECT_TRUE(lib.supportsNonblockingInit());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(lib.cuda().streamCreateWithFlags(&stream, kStreamNonBlocking), cudaSuccess);
  ncclUniqueId id{};
  ASSERT_EQ(lib.nccl().getUniqueId(&id), ncclSuccess);
  bool started = false;
  try {
    NcclCommunicator alone(lib, id, 0, 2, 0, stream, Millis(300), "rank 0: the test's comm",
                           [&] { started = true; });
    ADD_FAILURE() << "a communicator of two ranks completed with one";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0: the test's comm not complete after 300 ms: a "
                                         "member did not join"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(started);

  ASSERT_EQ(lib.nccl().getUniqueId(&id), ncclSuccess);
  NcclCommunicator one(lib, id, 0, 1, 0, stream, Millis(5000));
  EXPECT_TRUE(one.nonblocking());
  std::vector<float> buf = {1, 2, 3}, out(3, 0);
  one.alltoallv(buf.data(), {3 * sizeof(float)}, out.data(), {3 * sizeof(float)});  // a group
  ASSERT_EQ(lib.cuda().streamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(out, buf);
  {
    EnvScope old("HORA_EMU_NCCL_VERSION", "21300");
    GpuLibrary before214 = GpuLibrary::load();
    ASSERT_TRUE(before214.available());
    EXPECT_FALSE(before214.supportsNonblockingInit());
    ASSERT_EQ(before214.nccl().getUniqueId(&id), ncclSuccess);
    NcclCommunicator blocking(before214, id, 0, 1, 0, stream);
    EXPECT_FALSE(blocking.nonblocking());
  }
  lib.cuda().streamDestroy(stream);
}

}  // namespace
}  // namespace hora::gpu
