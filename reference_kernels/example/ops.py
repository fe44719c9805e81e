"""Entry functions of the bundled example: one per MatMul stage, `matmul` (the fastest stage) and `sigmoid`."""

import my_ops_ext
import torch


def matmul_scalar_gdram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_scalar_gdram(a, b)


def matmul_scalar_nram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_scalar_nram(a, b)


def matmul_vector(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_vector(a, b)


def matmul_multicore(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_multicore(a, b)


def matmul_pipeline(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_pipeline(a, b)


def matmul_sram_union(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_sram_union(a, b)


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.matmul_pipeline(a, b)


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.sigmoid_pipeline(x)
