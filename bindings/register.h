#pragma once
// The pieces of the hora._core extension module; module.cc calls each once, in this order.
#include <pybind11/pybind11.h>

namespace hora::bindings {

void registerErrors(pybind11::module_& m);        // errors.cc: hora::Error -> hora.errors.*
void registerEnums(pybind11::module_& m);         // register_enums.cc: OpKind, ReduceOp
void registerHandle(pybind11::module_& m);        // register_handle.cc: class Handle
void registerDeviceTensor(pybind11::module_& m);  // device_tensor.cc: GPU results
void registerRuntime(pybind11::module_& m);  // register_runtime.cc: init, process sets, timeline...
void registerStore(pybind11::module_& m);    // register_store.cc: StoreServer, StoreClient
void registerShared(pybind11::module_& m);   // register_shared.cc: blocks of the shared arena
void registerCallSite(pybind11::module_& m);  // call_site.cc: the user's file:line of a call
void registerSubmit(pybind11::module_& m);    // submit.cc: submit, the one way in for requests
void registerP2p(pybind11::module_& m);       // register_p2p.cc: PointToPoint
void registerJaxFfi(pybind11::module_& m);    // jax_ffi.cc: XLA FFI handlers for hora.jax

}  // namespace hora::bindings
