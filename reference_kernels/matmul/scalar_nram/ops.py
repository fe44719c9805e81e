"""MatMul, stage "scalar_nram": the entry function the grader calls."""

import my_ops_ext
import torch


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_scalar_nram(a, b)
