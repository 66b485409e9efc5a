// The engine's enumerations as Python enums (convertible to int), so that the frontends read the
// numbers the engine uses instead of declaring them again: OpKind (core/messages/messages.h)
// and ReduceOp (core/common/dtype.h). Only the kinds a frontend may submit are listed; the
// control kinds (Error, AddProcessSet, RemoveProcessSet) stay inside the engine.
#include <pybind11/pybind11.h>

#include "bindings/register.h"
#include "core/common/dtype.h"
#include "core/messages/messages.h"

namespace py = pybind11;

namespace hora::bindings {

void registerEnums(py::module_& m) {
  py::enum_<OpKind>(m, "OpKind", py::arithmetic(), "Kind of a submitted operation.")
      .value("ALLREDUCE", OpKind::Allreduce)
      .value("ALLGATHER", OpKind::Allgather)
      .value("BROADCAST", OpKind::Broadcast)
      .value("JOIN", OpKind::Join)
      .value("ADASUM", OpKind::Adasum)
      .value("ALLTOALL", OpKind::Alltoall)
      .value("BARRIER", OpKind::Barrier)
      .value("REDUCESCATTER", OpKind::Reducescatter);
  // Horovod's numbering (AVERAGE 0 .. PRODUCT 5); scripts pass these as plain ints.
  py::enum_<ReduceOp>(m, "ReduceOp", py::arithmetic(), "Reduction of allreduce/reducescatter.")
      .value("AVERAGE", ReduceOp::Average)
      .value("SUM", ReduceOp::Sum)
      .value("ADASUM", ReduceOp::Adasum)
      .value("MIN", ReduceOp::Min)
      .value("MAX", ReduceOp::Max)
      .value("PRODUCT", ReduceOp::Product);
}

}  // namespace hora::bindings
