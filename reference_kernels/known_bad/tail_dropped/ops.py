"""Sigmoid, stage "vector": the entry function the grader calls."""

import my_ops_ext
import torch


def sigmoid(x: torch.Tensor) -> torch.Tensor:
    return my_ops_ext.sigmoid_vector(x)
