#include <pybind11/pybind11.h>

#include "bindings/register.h"

PYBIND11_MODULE(_core, m) {
  m.doc() = "Hora engine: collective operations on DLPack tensors (use the hora package instead)";
  hora::bindings::registerErrors(m);
  hora::bindings::registerEnums(m);
  hora::bindings::registerHandle(m);
  hora::bindings::registerDeviceTensor(m);
  hora::bindings::registerRuntime(m);
  hora::bindings::registerStore(m);
  hora::bindings::registerShared(m);
  hora::bindings::registerCallSite(m);
  hora::bindings::registerSubmit(m);
  hora::bindings::registerP2p(m);
  hora::bindings::registerJaxFfi(m);
}
