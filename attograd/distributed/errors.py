"""The one error of attograd.distributed: a collective that could not complete, saying which ranks and why."""

class DistributedError(RuntimeError):
  """A collective failed: ranks disagreed on a tensor's shape or dtype, a rank did not arrive before the timeout, or a
  rank's process is gone. The message names the ranks."""
