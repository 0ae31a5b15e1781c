"""Both packages declare their licence the PEP 639 way (issue 18, item 6): an SPDX expression
string, not the `{text = ...}` table setuptools warns about on every install, built by a
setuptools that knows the string (77 and later)."""

import tomllib
from pathlib import Path

import pytest
from packaging.licenses import canonicalize_license_expression
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("pyproject", ["pyproject.toml", "sdk/pyproject.toml"])
def test_the_licence_is_an_spdx_expression_built_by_a_setuptools_that_knows_it(pyproject):
    data = tomllib.loads((ROOT / pyproject).read_text())
    licence = data["project"]["license"]
    assert isinstance(licence, str)
    assert canonicalize_license_expression(licence) == licence == "Apache-2.0"
    assert "License :: " not in " ".join(data["project"].get("classifiers", []))  # PEP 639
    (setuptools,) = [
        Requirement(r) for r in data["build-system"]["requires"] if r.startswith("setuptools")
    ]
    assert not setuptools.specifier.contains("76.1.0")
    assert setuptools.specifier.contains("77.0.3")


@pytest.mark.parametrize("package", [".", "sdk"])
def test_the_licence_text_ships_with_each_package(package):
    data = tomllib.loads((ROOT / package / "pyproject.toml").read_text())
    files = data["project"]["license-files"]
    texts = [(ROOT / package / name).read_text() for name in files]
    assert any("Apache License" in t and "Version 2.0, January 2004" in t for t in texts)
