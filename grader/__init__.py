"""bang-grader: autograder for Cambricon BANG C kernels (host side)."""

__version__ = "0.1.0"
