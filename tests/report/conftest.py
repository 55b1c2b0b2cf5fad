import pytest

from tests.report.lake_rows import build_lake


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    """(home, what was written) of a 3-iteration experiment."""
    home = tmp_path_factory.mktemp("report")
    return home, build_lake(home)
