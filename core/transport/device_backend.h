#pragma once
// DeviceBackend: what carries tensors that live on a device (the GPU path), seen from outside
// core/transport/: its name and its Capabilities, limits on device tensors included
// (capabilities.h). The runtime checks every device request against them before queueing it.
//
// Contract: deviceBackendFor() returns the process-wide backend for a kind of device, made on
// first use (which loads the backend's libraries, thread-safe) and kept until the process ends,
// never closed. Its capabilities are fixed from then on; capabilities() is cheap and may be
// called from any thread. A backend whose libraries are missing is still returned: its
// capabilities say why its path is off (Capabilities::offReason).
#include <string>

#include "core/common/device.h"
#include "core/transport/capabilities.h"

namespace hora {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual std::string name() const = 0;
  virtual const Capabilities& capabilities() const = 0;
};

// The backend registered for `kind`: "nccl" for CUDA devices. Throws InvalidArgument for the CPU,
// whose tensors the CPU transports carry (makeTransport(), transport.h).
const DeviceBackend& deviceBackendFor(DeviceKind kind);

}  // namespace hora
