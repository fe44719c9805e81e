// PyTorch binding of MatMul, stage "scalar_gdram": checks the operands, allocates c on their device and launches the
// BANG C entry on the current queue.
#include <torch/extension.h>

#include <limits>

#include "aten/utils/cnnl_util.h"
#include "aten/utils/tensor_util.h"
#include "framework/core/MLUStream.h"
#include "../mlu/matmul_scalar_gdram.h"

using namespace torch_mlu;

torch::Tensor matmul_scalar_gdram(torch::Tensor a, torch::Tensor b) {
  TORCH_CHECK(a.dim() == 2 && b.dim() == 2, "matmul_scalar_gdram: 2-D operands expected");
  TORCH_CHECK(a.size(1) == b.size(0), "matmul_scalar_gdram: a is ", a.sizes(), " but b is ", b.sizes());
  TORCH_CHECK(a.scalar_type() == b.scalar_type() &&
                  (a.scalar_type() == at::kFloat || a.scalar_type() == at::kHalf),
              "matmul_scalar_gdram: float32 or float16 operands of one dtype expected, got ", a.scalar_type(), " and ",
              b.scalar_type());
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  TORCH_CHECK(M * K < std::numeric_limits<int>::max() && K * N < std::numeric_limits<int>::max() &&
                  M * N < std::numeric_limits<int>::max(),
              "matmul_scalar_gdram: operands too large");
  auto lhs = torch_mlu::cnnl_contiguous(a);
  auto rhs = torch_mlu::cnnl_contiguous(b);
  auto c = at::empty({M, N}, lhs.options());
  if (c.numel() == 0) return c;
  if (K == 0) return c.zero_();  // an empty sum; the kernel is not needed for that
  const bool is_half = lhs.scalar_type() == at::kHalf;
  cnrtQueue_t queue = getCurMLUStream();
  matmul_scalar_gdram_entry(queue, mlu_data_ptr(getMluTensorImpl(lhs)), mlu_data_ptr(getMluTensorImpl(rhs)),
                            mlu_data_ptr(getMluTensorImpl(c)),
                            /*workspace=*/nullptr, (int)M, (int)K, (int)N, is_half);  // scalar sums never leave the core
  const cnrtRet_t launch_status = cnrtGetLastError();  // the launch is asynchronous: errors surface here
  TORCH_CHECK(launch_status == cnrtSuccess, "kernel launch failed: ", cnrtGetErrorStr(launch_status));
  return c;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("matmul_scalar_gdram", &matmul_scalar_gdram, "MatMul, stage scalar_gdram"); }
