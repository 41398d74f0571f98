"""Scheduling and execution: tensor graphs -> ordered kernels -> runs."""
