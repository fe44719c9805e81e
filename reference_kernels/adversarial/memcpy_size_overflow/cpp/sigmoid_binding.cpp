// PyTorch binding in the AICS-lab style (CATCH-era header, getCurQueue(), PYBIND11_MODULE): checks the
// input, allocates the output on the input's device and launches the BANG C entry on the current queue.
#include <torch/extension.h>

#include "aten/operators/bang/bang_kernel.h"
#include "aten/operators/bang/internal/bang_internal.h"
#include "../mlu/sigmoid_vector.h"

using namespace torch_mlu;

torch::Tensor sigmoid_vector(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf,
              "sigmoid_vector: float32 or float16 input expected, got ", x.scalar_type());
  auto input = torch_mlu::cnnl_contiguous(x);
  auto output = at::empty_like(input);
  if (input.numel() == 0) return output;
  cnrtQueue_t queue = getCurQueue();
  sigmoid_vector_entry(queue, getMluTensorImpl(input)->mlu_data_ptr(),
                       getMluTensorImpl(output)->mlu_data_ptr(), input.numel(),
                       input.scalar_type() == at::kHalf);
  TORCH_BANGC_KERNEL_LAUNCH_CHECK();
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sigmoid_vector", &sigmoid_vector, "Sigmoid on one MLU core with NRAM tiling");
}
