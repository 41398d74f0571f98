"""The IR: UOps, pattern matching and rewriting, symbolic index math and views."""
