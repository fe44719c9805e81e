// Adversarial fixture mlu_decoy_matmul: launches the trivial kernel on a one-float scratch tensor.
#include <torch/extension.h>

#include "aten/utils/cnnl_util.h"
#include "aten/utils/tensor_util.h"
#include "framework/core/MLUStream.h"
#include "../mlu/decoy_touch.h"

using namespace torch_mlu;

torch::Tensor touch(torch::Tensor like) {
  auto scratch = at::empty({1}, like.options().dtype(at::kFloat));
  decoy_touch_entry(getCurMLUStream(), mlu_data_ptr(getMluTensorImpl(scratch)));
  const cnrtRet_t status = cnrtGetLastError();
  TORCH_CHECK(status == cnrtSuccess, "kernel launch failed: ", cnrtGetErrorStr(status));
  return scratch;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("touch", &touch, "a trivial kernel (adversarial fixture)"); }
