"""Runtimes: one file per device, each an Allocator, a Compiler and a Program."""
