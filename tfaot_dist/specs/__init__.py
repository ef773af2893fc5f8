"""Packaging specs rendered from the registry (cmsBuild, rpm) and their release numbers."""
