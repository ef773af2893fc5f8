from pathlib import Path
import pytest
from test_oci import Registry, registry_server  # noqa: F401
from test_oci import test_concurrent_publishes_both_land as once


@pytest.mark.parametrize("i", range(20))
def test_repeat(i: int, built: Path, registry_server: Registry, tmp_path: Path, cache: Path) -> None:  # noqa: F811
    once(built, registry_server, tmp_path, cache)
