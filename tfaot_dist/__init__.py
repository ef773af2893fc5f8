"""tfaot-dist: build, verify and distribute AOT compiled TensorFlow models."""

__version__ = "0.1.0"
