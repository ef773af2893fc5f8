"""Optional performance commands: bench (AOT against TensorFlow) and tune (batch rules)."""
