"""Trust beyond the transport: signed channels (TUF metadata: keys.py, repository.py, verify.py)
and the bill of materials of every package (sbom.py)."""
