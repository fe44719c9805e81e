// PyTorch bindings of the bundled example (AICS-lab style, PYBIND11_MODULE): one function per MatMul
// stage, all checked and launched the same way, plus the pipelined Sigmoid.
#include <torch/extension.h>

#include <limits>

#include "aten/utils/cnnl_util.h"
#include "aten/utils/tensor_util.h"
#include "framework/core/MLUStream.h"
#include "../mlu/matmul_multicore.h"
#include "../mlu/matmul_pipeline.h"
#include "../mlu/matmul_scalar_gdram.h"
#include "../mlu/matmul_scalar_nram.h"
#include "../mlu/matmul_sram_union.h"
#include "../mlu/matmul_vector.h"
#include "../mlu/sigmoid_pipeline.h"

using namespace torch_mlu;

using MatmulEntry = void (*)(cnrtQueue_t, const void*, const void*, void*, float*, int, int, int, bool);

static torch::Tensor launch_matmul(const torch::Tensor& a, const torch::Tensor& b, const char* name,
                                   MatmulEntry entry) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, name, ": 2-D operands expected");
  TORCH_CHECK(a.size(1) == b.size(0), name, ": a is ", a.sizes(), " but b is ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type() &&
                  (a.scalar_type() == at::kFloat || a.scalar_type() == at::kHalf),
              name, ": float32 or float16 operands of one dtype expected, got ", a.scalar_type(), " and ",
              b.scalar_type());
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  TORCH_CHECK(M * K < std::numeric_limits<int>::max() && K * N < std::numeric_limits<int>::max() &&
                  M * N < std::numeric_limits<int>::max(),
              name, ": operands too large");
  auto lhs = torch_mlu::cnnl_contiguous(a);
  auto rhs = torch_mlu::cnnl_contiguous(b);
  auto c = at::empty({M, N}, lhs.options());
  if (c.numel() == 0) return c;
  if (K == 0) return c.zero_();  // an empty sum; the kernel is not needed for that
  const bool is_half = lhs.scalar_type() == at::kHalf;
  // fp16 sums stay in fp32 between K tiles: M x N floats of scratch on the device (fp32 sums live in c).
  auto workspace = is_half ? at::empty({M, N}, lhs.options().dtype(at::kFloat)) : at::Tensor();
  cnrtQueue_t queue = getCurMLUStream();
  entry(queue, mlu_data_ptr(getMluTensorImpl(lhs)), mlu_data_ptr(getMluTensorImpl(rhs)),
        mlu_data_ptr(getMluTensorImpl(c)),
        is_half ? static_cast<float*>(mlu_data_ptr(getMluTensorImpl(workspace))) : nullptr, (int)M, (int)K,
        (int)N, is_half);
  const cnrtRet_t launch_status = cnrtGetLastError();  // the launch is asynchronous: errors surface here
  TORCH_CHECK(launch_status == cnrtSuccess, "kernel launch failed: ", cnrtGetErrorStr(launch_status));
  return c;
}

static torch::Tensor sigmoid_pipeline(torch::Tensor x) {
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

#define DEF_MATMUL_STAGE(m, stage)                                          \
  m.def(#stage, [](const torch::Tensor& a, const torch::Tensor& b) {        \
    return launch_matmul(a, b, #stage, stage##_entry);                      \
  })

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  DEF_MATMUL_STAGE(m, matmul_scalar_gdram);
  DEF_MATMUL_STAGE(m, matmul_scalar_nram);
  DEF_MATMUL_STAGE(m, matmul_vector);
  DEF_MATMUL_STAGE(m, matmul_multicore);
  DEF_MATMUL_STAGE(m, matmul_pipeline);
  DEF_MATMUL_STAGE(m, matmul_sram_union);
  m.def("sigmoid_pipeline", &sigmoid_pipeline, "Sigmoid over every core, double-buffered");
}
