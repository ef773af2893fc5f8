"""C++ around the compiled models: the XLA runtime and Abseil builds, the per-level kernels, the build kit, precompiled headers, weight sharing, build-system and scram tool files."""

from pathlib import Path

# The C++ interface headers every package and program includes (tfaot/*.h).
INTERFACE_INCLUDE = Path(__file__).parent / "runtime" / "include"
