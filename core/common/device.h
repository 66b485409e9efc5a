#pragma once
// Device: where a tensor's memory lives. The CPU (host memory) or a CUDA device by ordinal.
// Requests carry it as one number (code(): -1 for the CPU, else the CUDA ordinal) so ranks can
// agree on it without knowing this type.
#include <cstdint>
#include <string>

namespace hora {

enum class DeviceKind : uint8_t { Cpu, Cuda };

struct Device {
  DeviceKind kind = DeviceKind::Cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device cpu() { return Device(); }
  static Device cuda(int ordinal) { return Device{DeviceKind::Cuda, ordinal}; }
  // The inverse of code().
  static Device fromCode(int32_t code) { return code < 0 ? cpu() : cuda(code); }

  bool isCpu() const { return kind == DeviceKind::Cpu; }
  int32_t code() const { return isCpu() ? -1 : index; }
  std::string name() const { return isCpu() ? "CPU" : "GPU " + std::to_string(index); }

  bool operator==(const Device& o) const { return kind == o.kind && (isCpu() || index == o.index); }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

}  // namespace hora
