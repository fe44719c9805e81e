// Adversarial fixture host_compute_binding: launches the real kernel on one element, so a launch shows in
// the trace, then computes every other element with a host loop straight into the output's device memory.
#include <torch/extension.h>

#include <cmath>

#include "aten/operators/bang/bang_kernel.h"
#include "aten/operators/bang/internal/bang_internal.h"
#include "../mlu/sigmoid_vector.h"

using namespace torch_mlu;

torch::Tensor sigmoid_vector(torch::Tensor x) {
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kHalf, "float32 or float16 expected");
  auto input = torch_mlu::cnnl_contiguous(x);
  auto output = at::empty_like(input);
  if (input.numel() == 0) return output;
  cnrtQueue_t queue = getCurQueue();
  const bool is_half = input.scalar_type() == at::kHalf;
  void* in = getMluTensorImpl(input)->mlu_data_ptr();
  void* out = getMluTensorImpl(output)->mlu_data_ptr();
  sigmoid_vector_entry(queue, in, out, 1, is_half);
  TORCH_BANGC_KERNEL_LAUNCH_CHECK();
  const int64_t n = input.numel();
  if (is_half) {
    auto* src = static_cast<const at::Half*>(in);
    auto* dst = static_cast<at::Half*>(out);
    for (int64_t i = 0; i < n; ++i) dst[i] = at::Half(1.0f / (1.0f + std::exp(-static_cast<float>(src[i]))));
  } else {
    auto* src = static_cast<const float*>(in);
    auto* dst = static_cast<float*>(out);
    for (int64_t i = 0; i < n; ++i) dst[i] = 1.0f / (1.0f + std::exp(-src[i]));
  }
  return output;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("sigmoid_vector", &sigmoid_vector, "Sigmoid computed on the host (adversarial fixture)");
}
