"""CUDA-like tensors over the GPU emulation (tests/gpu_emulation), for the GPU tests.

``EmuTensor`` lives in emulated device memory and speaks DLPack as a CUDA tensor of torch does:
``__dlpack_device__`` says (kDLCUDA, ordinal), and ``__dlpack__(stream=s)`` makes stream ``s``
wait for the tensor's producer stream (event record + stream wait), with no host sync. Its data can
be written late on the producer stream (``delay_ms``), like the output of a slow kernel.
"""
from __future__ import annotations

import ctypes
import os
from typing import Any

import hora
import ml_dtypes
import numpy as np

KDL_CUDA = 2
_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}


def library() -> ctypes.CDLL:
    """The emulation the engine loads (the same path gives the same instance)."""
    path = os.environ["HORA_CUDA_LIBRARY"]
    lib = ctypes.CDLL(path)
    lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    lib.cudaStreamCreateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
    lib.cudaEventCreateWithFlags.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_uint]
    lib.cudaEventRecord.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    lib.cudaStreamWaitEvent.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint]
    lib.horaEmuDelayedCopy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t,
                                       ctypes.c_int, ctypes.c_void_p]
    return lib


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_NAME = b"dltensor"
_exports: dict[int, Any] = {}  # address of a DLManagedTensor -> what it keeps alive


@_DELETER
def _release(address: int) -> None:
    entry = _exports.pop(address, None)
    if entry is not None and entry[1] is not None:
        entry[1]()


def _dtype_of(dtype: np.dtype, bf16: bool) -> DLDataType:
    if bf16:
        return DLDataType(4, 16, 1)
    return DLDataType(_CODES[dtype.kind], dtype.itemsize * 8, 1)


class EmuTensor:
    """A tensor in emulated device memory with its own producer stream."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, device: int = 0,
                 bf16: bool = False) -> None:
        self.lib = library()
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(np.uint16 if bf16 else dtype)
        self.bf16 = bf16
        self.device = device
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        ptr = ctypes.c_void_p()
        assert self.lib.cudaMalloc(ctypes.byref(ptr), max(self.nbytes, 1)) == 0
        self.ptr = ptr.value
        ctypes.memset(self.ptr, 0, max(self.nbytes, 1))
        stream = ctypes.c_void_p()
        assert self.lib.cudaStreamCreateWithFlags(ctypes.byref(stream), 1) == 0
        self.stream = stream.value
        self._keep: list[Any] = []  # host sources and events the streams may still use
        self.on_release: Any = None  # called when the engine releases a DLPack export

    @classmethod
    def from_numpy(cls, array: np.ndarray, device: int = 0, delay_ms: int = 0,
                   bf16: bool = False) -> EmuTensor:
        """A tensor whose values are written on its producer stream after ``delay_ms``."""
        t = cls(array.shape, array.dtype, device, bf16)
        source = np.ascontiguousarray(array).view(t.dtype).copy()
        t._keep.append(source)
        if t.nbytes:
            t.lib.horaEmuDelayedCopy(t.ptr, source.ctypes.data, t.nbytes, delay_ms, t.stream)
        return t

    def numpy(self) -> np.ndarray:
        """The values once the producer stream is done (a host sync, for checking only)."""
        self.lib.cudaStreamSynchronize(self.stream)
        return self.peek()

    def peek(self) -> np.ndarray:
        """The values in memory now, without waiting for anything."""
        raw = ctypes.string_at(self.ptr, self.nbytes) if self.nbytes else b""
        return np.frombuffer(raw, dtype=self.dtype).reshape(self.shape).copy()

    def __dlpack_device__(self) -> tuple[int, int]:
        return (KDL_CUDA, self.device)

    def __dlpack__(self, *, stream: Any = None, max_version: Any = None, dl_device: Any = None,
                   copy: Any = None) -> Any:
        if stream is not None and stream != -1:
            # As torch does: the consumer's stream waits for the producer's work, no host sync.
            event = ctypes.c_void_p()
            self.lib.cudaEventCreateWithFlags(ctypes.byref(event), 2)
            self.lib.cudaEventRecord(event, self.stream)
            self.lib.cudaStreamWaitEvent(stream, event, 0)
            self._keep.append(event)
        shape = (ctypes.c_int64 * max(len(self.shape), 1))(*self.shape)
        managed = DLManagedTensor()
        managed.dl_tensor = DLTensor(self.ptr, DLDevice(KDL_CUDA, self.device), len(self.shape),
                                     _dtype_of(self.dtype, self.bf16), shape, None, 0)
        managed.deleter = _release
        address = ctypes.addressof(managed)
        _exports[address] = ((managed, shape, self), self.on_release)
        return _capsule_new(address, _NAME, None)


_get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_get_pointer.restype = ctypes.c_void_p
_get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_set_name = ctypes.pythonapi.PyCapsule_SetName
_set_name.argtypes = [ctypes.py_object, ctypes.c_char_p]
_CAPSULE_DTYPES = {(0, 8): np.int8, (0, 32): np.int32, (0, 64): np.int64, (1, 8): np.uint8,
                   (2, 16): np.float16, (2, 32): np.float32, (2, 64): np.float64,
                   (4, 16): ml_dtypes.bfloat16}


def read_capsule(capsule: Any) -> tuple[np.ndarray, int] | None:
    """Consume a CUDA DLPack capsule (as a framework's ``from_dlpack`` does): its values and
    device ordinal, the capsule marked used and its deleter called. None for a CPU capsule,
    which is left untouched."""
    address = _get_pointer(capsule, _NAME)
    managed = DLManagedTensor.from_address(address)
    t = managed.dl_tensor
    if t.device.device_type != KDL_CUDA:
        return None
    shape = tuple(t.shape[i] for i in range(t.ndim))
    dtype = np.dtype(_CAPSULE_DTYPES[(t.dtype.code, t.dtype.bits)])
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = ctypes.string_at(t.data + t.byte_offset, nbytes) if nbytes else b""
    values = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    _set_name(capsule, b"used_dltensor")
    managed.deleter(address)
    return values, int(t.device.device_id)


def device_values(out: Any, dtype: Any) -> np.ndarray:
    """The values of an engine GPU result (``_core.DeviceTensor``), complete once waited."""
    raw = ctypes.string_at(out.data_ptr, out.nbytes) if out.nbytes else b""
    return np.frombuffer(raw, dtype=dtype).reshape(tuple(out.shape)).copy()


def rank_data(rank: int, seed: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Rank `rank`'s values: small integers, so sums and products stay exact in every dtype."""
    rng = np.random.default_rng(1000 * seed + rank)
    low = 0 if dtype == "uint8" else -4
    values = rng.integers(low, 5, size=shape)
    return values.astype(ml_dtypes.bfloat16 if dtype == "bfloat16" else dtype)


def emu(values: np.ndarray, delay_ms: int = 0) -> EmuTensor:
    """`values` in this rank's emulated device memory (bfloat16 as its bits)."""
    bf16 = values.dtype == ml_dtypes.bfloat16
    return EmuTensor.from_numpy(values.view(np.uint16) if bf16 else values,
                                device=hora.local_rank(), delay_ms=delay_ms, bf16=bf16)


def read(t: EmuTensor, dtype: str) -> np.ndarray:
    """A tensor's values on the host, bfloat16 as bfloat16."""
    values = t.numpy()
    return values.view(ml_dtypes.bfloat16) if dtype == "bfloat16" else values
