/*
 * DLPack: the in-memory tensor exchange ABI (https://github.com/dmlc/dlpack), version 0.8 layout.
 *
 * Written for Hora from the public specification; only the declarations Hora needs. The struct
 * layouts and enum values are the ABI and must not change:
 *   - A producer hands out a PyCapsule named "dltensor" holding a DLManagedTensor*.
 *   - The consumer renames the capsule to "used_dltensor" and, once it no longer needs the data,
 *     calls the tensor's deleter (exactly once).
 *   - Shapes and strides count elements, not bytes; strides == NULL means compact row-major.
 */
#ifndef HORA_THIRD_PARTY_DLPACK_H_
#define HORA_THIRD_PARTY_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

#define DLPACK_VERSION 80
#define DLPACK_ABI_VERSION 1

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16,
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U,
} DLDataTypeCode;

typedef struct {
  uint8_t code;    /* a DLDataTypeCode */
  uint8_t bits;    /* bits per lane */
  uint16_t lanes;  /* 1 for scalar element types */
} DLDataType;

typedef struct {
  void* data;            /* base pointer; the first element is at data + byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;        /* ndim entries */
  int64_t* strides;      /* ndim entries in elements, or NULL for compact row-major */
  uint64_t byte_offset;
} DLTensor;

typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;                           /* the producer's private state */
  void (*deleter)(struct DLManagedTensor* self);  /* may be NULL */
} DLManagedTensor;

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif  /* HORA_THIRD_PARTY_DLPACK_H_ */
