// PyTorch binding, AICS-lab style (PYBIND11_MODULE): checks the input, allocates the output on the
// input's device and launches the BANG C entry on the current queue.
#include <torch/extension.h>

#include "aten/utils/cnnl_util.h"
#include "aten/utils/tensor_util.h"
#include "framework/core/MLUStream.h"
#include "../mlu/sigmoid_pipeline.h"

using namespace torch_mlu;

torch::Tensor sigmoid_pipeline(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf,
              "sigmoid_pipeline: float32 or float16 input expected, got ", x.scalar_type());
  auto input = torch_mlu::cnnl_contiguous(x);
  auto output = at::empty_like(input);
  if (input.numel() == 0) return output;
  cnrtQueue_t queue = getCurMLUStream();
  sigmoid_pipeline_entry(queue, mlu_data_ptr(getMluTensorImpl(input)),
                         mlu_data_ptr(getMluTensorImpl(output)), input.numel(),
                         input.scalar_type() == at::kHalf);
  const cnrtRet_t launch_status = cnrtGetLastError();  // the launch is asynchronous: errors surface here
  TORCH_CHECK(launch_status == cnrtSuccess, "kernel launch failed: ", cnrtGetErrorStr(launch_status));
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sigmoid_pipeline", &sigmoid_pipeline, "Sigmoid over every core, double-buffered");
}
