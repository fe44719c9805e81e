// PyTorch binding, torch_mlu 2.x style: the op is registered with TORCH_LIBRARY and implemented for
// the MLU dispatch key (PrivateUse1); Python calls it as torch.ops.reference_sigmoid.sigmoid_multicore.
#include <torch/library.h>
#include <torch/torch.h>

#include "aten/utils/cnnl_util.h"
#include "aten/utils/tensor_util.h"
#include "framework/core/MLUStream.h"
#include "../mlu/sigmoid_multicore.h"

using namespace torch_mlu;

torch::Tensor sigmoid_multicore(const torch::Tensor& x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf,
              "sigmoid_multicore: float32 or float16 input expected, got ", x.scalar_type());
  auto input = torch_mlu::cnnl_contiguous(x);
  auto output = at::empty_like(input);
  if (input.numel() == 0) return output;
  cnrtQueue_t queue = getCurMLUStream();
  sigmoid_multicore_entry(queue, mlu_data_ptr(getMluTensorImpl(input)),
                          mlu_data_ptr(getMluTensorImpl(output)), input.numel(),
                          input.scalar_type() == at::kHalf);
  const cnrtRet_t launch_status = cnrtGetLastError();  // the launch is asynchronous: errors surface here
  TORCH_CHECK(launch_status == cnrtSuccess, "kernel launch failed: ", cnrtGetErrorStr(launch_status));
  return output;
}

TORCH_LIBRARY(reference_sigmoid, m) { m.def("sigmoid_multicore(Tensor x) -> Tensor"); }

TORCH_LIBRARY_IMPL(reference_sigmoid, PrivateUse1, m) {
  m.impl("sigmoid_multicore", TORCH_FN(sigmoid_multicore));
}
