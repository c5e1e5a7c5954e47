"""Deprecated public names (docs/RELEASING.md, "Deprecation"): each warns `DeprecationWarning` naming its
replacement and the release that removes it, and works as the replacement does until then.

`Ratios.fit` was removed after 0.1.0 without a deprecation period (it made ndcost.spec import
ndcost.io.calibrate); it is back as an alias of ``fit_ratios(...).ratios`` for one minor release, reached
through a hook calibrate registers, so that spec still imports nothing above it.
"""
from __future__ import annotations

import re
import warnings

import pytest

import ndcost
from ndcost import Ratios
from ndcost.io import calibrate
from ndcost.io.calibrate import fit_ratios
from ndcost.spec import ratios as ratios_module
from test_calibrate import DENSE, DENSE_TRUE, DEVICE, synthetic

#: A release number as docs/RELEASING.md's semantic versioning writes it.
VERSION = re.compile(r"\d+\.\d+\.\d+")


def _minor(version: str) -> tuple[int, int]:
    major, minor, _ = (int(part) for part in version.split("."))
    return major, minor


@pytest.fixture(scope="module")
def dense():
    return synthetic(*DENSE, DENSE_TRUE)


@pytest.mark.parametrize("method", ["nd", "nnls"])
def test_ratios_fit_warns_and_fits_as_fit_ratios(dense, method):
    model, rows = dense
    with pytest.warns(DeprecationWarning) as caught:
        fitted = Ratios.fit(rows, model, DEVICE, method=method)
    assert fitted == fit_ratios(rows, model, DEVICE, method=method).ratios
    assert [w.category for w in caught] == [DeprecationWarning]
    message = str(caught[0].message)
    assert "Ratios.fit is deprecated" in message
    assert f"{fit_ratios.__module__}.fit_ratios(" in message and ").ratios" in message
    assert f"removed in {ratios_module.FIT_REMOVED_IN}" in message
    assert caught[0].filename == __file__, "the warning points at the caller's line (stacklevel)"


def test_ratios_fit_takes_fit_ratios_arguments_by_position_and_keyword(dense):
    model, rows = dense
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        positional = Ratios.fit(rows, model, DEVICE, "nd", "nd", csv="runs.csv")
    assert positional.fitted_on["csv"] == "runs.csv"
    assert positional == fit_ratios(rows, model, DEVICE, "nd", "nd", csv="runs.csv").ratios


def test_ratios_fit_refuses_what_fit_ratios_refuses(dense):
    model, rows = dense
    with pytest.warns(DeprecationWarning), pytest.raises(ndcost.SpecError, match="'units' parameter of fit_ratios"):
        Ratios.fit(rows, model, DEVICE, "ms")


def test_the_deprecation_lasts_one_minor_release():
    """Deprecated in the next minor release after 0.1.0 (where it was removed), gone one minor later."""
    deprecated, removed = ratios_module.FIT_DEPRECATED_IN, ratios_module.FIT_REMOVED_IN
    assert VERSION.fullmatch(deprecated) and VERSION.fullmatch(removed)
    major, minor = _minor(deprecated)
    assert _minor(removed) == (major, minor + 1)
    # It is still here: this release is before the one that removes it.
    assert _minor(ndcost.__version__) < _minor(removed)


def test_the_hook_is_calibrates_fit_ratios():
    assert ratios_module._ratio_fitter is calibrate.fit_ratios


def test_without_the_hook_the_alias_says_what_is_missing(monkeypatch):
    """spec imports nothing from io (tests/test_package_layers.py): with no fitter registered the alias
    raises instead of importing upwards."""
    monkeypatch.setattr(ratios_module, "_ratio_fitter", None)
    with pytest.raises(RuntimeError, match="ndcost.io.calibrate is not imported"):
        Ratios.fit([], None, None)
