"""docs/architecture.md's floor table is the "House floors" import contract in pyproject.toml
(`make lint` enforces the contract; this keeps the page that explains it from drifting)."""

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _contract_floors() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    (floors,) = [c for c in contracts if c["name"].startswith("House floors")]
    return [" ".join(layer.split()) for layer in floors["layers"]]


def _documented_floors() -> list[tuple[int, str]]:
    page = (ROOT / "docs" / "architecture.md").read_text()
    table = page.split("<!-- floors:start -->", 1)[1].split("<!-- floors:end -->", 1)[0]
    rows = []
    for line in table.strip().splitlines()[2:]:  # past the header and its rule
        number, rooms = (cell.strip() for cell in line.strip().strip("|").split("|", 1))
        rooms = rooms.rstrip("|").strip().replace("\\|", "|").replace("`", "")
        rows.append((int(number), " ".join(rooms.split())))
    return rows


def test_the_floor_table_is_the_house_floors_contract_top_to_bottom():
    documented = _documented_floors()
    contract = _contract_floors()
    assert [rooms for _, rooms in documented] == contract
    assert [number for number, _ in documented] == list(range(len(contract) - 1, -1, -1))


def test_every_room_the_page_names_as_a_package_exists():
    page = (ROOT / "docs" / "architecture.md").read_text()
    rooms = page.split("## Rooms", 1)[1].split("## Floors", 1)[0]
    for package in re.findall(r"^\| `([\w/]+)/`", rooms, re.M):
        assert (ROOT / package).is_dir(), package
