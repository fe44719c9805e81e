"""Standalone lab programs (a folder of NN_*.mlu with their own main()) graded stage by stage."""
