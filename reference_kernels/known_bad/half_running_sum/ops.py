"""MatMul, stage "scalar_gdram": the entry function the grader calls."""

import my_ops_ext
import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_scalar_gdram(a, b)
