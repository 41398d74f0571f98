"""Tensor methods written purely in terms of other Tensor methods, grouped by topic and mixed into Tensor."""
