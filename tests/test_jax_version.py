"""The guard against jaxlib releases with the batched CPU LAPACK deadlock."""
import warnings

import pytest

from approxcv._runtime.version import deadlock_prone, parse_version, warn_if_deadlock_prone


@pytest.mark.parametrize("version, parsed", [("0.10.2", (0, 10, 2)), ("0.9.2", (0, 9, 2)),
                                             ("0.11.1.dev20260101", (0, 11, 1)),
                                             ("0.10", (0, 10, 0)), ("0.4.38+cuda", (0, 4, 38))])
def test_parse_version(version, parsed):
    assert parse_version(version) == parsed


@pytest.mark.parametrize("version, prone", [("0.9.2", False), ("0.10.0", True), ("0.10.2", True),
                                            ("0.11.0", True), ("0.11.1", False), ("0.12.0", False),
                                            ("0.4.38", False)])
def test_deadlock_prone_range(version, prone):
    assert deadlock_prone(version) is prone


def test_warns_only_inside_the_range():
    with pytest.warns(RuntimeWarning, match="deadlock"):
        warn_if_deadlock_prone("0.10.2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_if_deadlock_prone("0.9.2")


def test_the_installed_jaxlib_is_outside_the_range():
    """pyproject.toml excludes the deadlock-prone releases; an install that ignores it fails here."""
    import jaxlib
    assert not deadlock_prone(jaxlib.__version__)
