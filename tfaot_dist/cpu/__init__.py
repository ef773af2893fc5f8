"""x86-64 CPU levels: the one table of what each level requires (levels.py)."""
