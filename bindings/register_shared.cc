// hora._core's view of the shared arena (core/transport/shared_pool.h): blocks that frontends
// place tensors in, so that the other ranks read them in place.
#include <pybind11/pybind11.h>

#include <memory>

#include "bindings/py_handle.h"
#include "bindings/register.h"
#include "core/runtime.h"

namespace py = pybind11;

namespace hora::bindings {
namespace {

// One block, exported through the buffer protocol: a NumPy array or torch tensor made from it
// holds the block, and with it the arena's mapping, for as long as it lives.
struct SharedBlock {
  std::shared_ptr<void> memory;
  size_t bytes;
};

std::shared_ptr<SharedPool> currentPool() {
  auto rt = currentRuntime();
  return rt ? rt->sharedPool() : nullptr;
}

}  // namespace

void registerShared(py::module_& m) {
  py::class_<SharedBlock>(m, "SharedBlock", py::buffer_protocol(),
                          "A block of the shared arena; wrap it with numpy.frombuffer or "
                          "torch.frombuffer (uint8, writable).")
      .def_buffer([](SharedBlock& b) {
        return py::buffer_info(b.memory.get(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(b.bytes)}, {1});
      })
      .def("__len__", [](const SharedBlock& b) { return b.bytes; });
  m.def(
      "shared_block",
      [](size_t bytes) -> py::object {
        auto pool = currentPool();
        if (!pool || bytes == 0) return py::none();
        std::shared_ptr<void> memory;
        {
          py::gil_scoped_release release;
          memory = pool->allocate(bytes);
        }
        if (!memory) return py::none();
        return py::cast(SharedBlock{std::move(memory), bytes});
      },
      py::arg("bytes"),
      "A zeroed block of the shared arena that the other ranks read in place during window "
      "allreduces, or None: no arena on this job's transport (not every rank on this host, "
      "HORA_SHM_ARENA_BYTES=0, no windows), or no room left. It stays valid after shutdown.");
  m.def(
      "shared_pool_info",
      []() -> py::object {
        auto pool = currentPool();
        if (!pool) return py::none();
        py::dict d;
        d["bytes_free"] = pool->bytesFree();
        d["parts_read_in_place"] = pool->partsReadInPlace();
        d["parts_staged"] = pool->partsStaged();
        return d;
      },
      "None without a shared arena, else dict(bytes_free, parts_read_in_place: window "
      "allreduce parts the other ranks read from this rank's arena, parts_staged: parts "
      "copied into the window instead).");
  m.def(
      "in_shared_pool",
      [](uintptr_t address, size_t bytes) {
        auto pool = currentPool();
        return pool != nullptr && pool->contains(reinterpret_cast<const void*>(address), bytes);
      },
      py::arg("address"), py::arg("bytes"),
      "Whether [address, address + bytes) lies in this rank's part of the shared arena.");
}

}  // namespace hora::bindings
