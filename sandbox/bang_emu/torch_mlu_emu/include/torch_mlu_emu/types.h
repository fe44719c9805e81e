// bang_emu: the dtype helpers of torch_mlu's aten/util(s)/types.h that custom-op bindings call
// (getCnnlType(impl), cnnlType2CnrtType(...)). Only the enum values are modelled; there is no CNNL library.
#pragma once

#include <ATen/ATen.h>
#include <c10/core/TensorImpl.h>

#include "cnrt.h"

#ifndef BANG_EMU_CNNL_DTYPE_DEFINED
#define BANG_EMU_CNNL_DTYPE_DEFINED
typedef enum {
  CNNL_DTYPE_INVALID = 0,
  CNNL_DTYPE_HALF = 1,
  CNNL_DTYPE_FLOAT = 2,
  CNNL_DTYPE_INT8 = 3,
  CNNL_DTYPE_INT16 = 4,
  CNNL_DTYPE_INT31 = 5,
  CNNL_DTYPE_INT32 = 6,
  CNNL_DTYPE_UINT8 = 7,
  CNNL_DTYPE_BOOL = 8,
  CNNL_DTYPE_INT64 = 9,
  CNNL_DTYPE_DOUBLE = 14,
  CNNL_DTYPE_BFLOAT16 = 16
} cnnlDataType_t;
#endif

namespace torch_mlu {

inline cnnlDataType_t getCnnlDataType(const caffe2::TypeMeta& dtype) {
  switch (c10::typeMetaToScalarType(dtype)) {
    case at::kFloat: return CNNL_DTYPE_FLOAT;
    case at::kHalf: return CNNL_DTYPE_HALF;
    case at::kBFloat16: return CNNL_DTYPE_BFLOAT16;
    case at::kDouble: return CNNL_DTYPE_DOUBLE;
    case at::kInt: return CNNL_DTYPE_INT32;
    case at::kShort: return CNNL_DTYPE_INT16;
    case at::kChar: return CNNL_DTYPE_INT8;
    case at::kByte: return CNNL_DTYPE_UINT8;
    case at::kBool: return CNNL_DTYPE_BOOL;
    case at::kLong: return CNNL_DTYPE_INT64;
    default: return CNNL_DTYPE_INVALID;
  }
}
inline cnnlDataType_t getCnnlType(const c10::TensorImpl* impl) { return getCnnlDataType(impl->dtype()); }
inline cnnlDataType_t getCnnlType(const at::Tensor& t) { return getCnnlDataType(t.dtype()); }

inline cnrtDataType_t cnnlType2CnrtType(cnnlDataType_t t) {
  switch (t) {
    case CNNL_DTYPE_HALF: return CNRT_FLOAT16;
    case CNNL_DTYPE_FLOAT: return CNRT_FLOAT32;
    case CNNL_DTYPE_DOUBLE: return CNRT_FLOAT64;
    case CNNL_DTYPE_INT8: return CNRT_INT8;
    case CNNL_DTYPE_INT16: return CNRT_INT16;
    case CNNL_DTYPE_INT32: return CNRT_INT32;
    case CNNL_DTYPE_INT64: return CNRT_INT64;
    case CNNL_DTYPE_UINT8: return CNRT_UINT8;
    case CNNL_DTYPE_BOOL: return CNRT_BOOL;
    default: return CNRT_INVALID;
  }
}

}  // namespace torch_mlu
