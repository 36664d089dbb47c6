"""Compare the installed versions with the lower bounds pyproject.toml declares.

Run by scripts/min_versions.sh in an environment installed with uv's ``lowest-direct``
resolution: there every direct requirement should sit exactly at its declared floor. A
package installed above its floor means that floor cannot be installed together with the
rest of ``[all]`` (another requirement forces more): the floor is not true, so raise it.

Usage (Python 3.11+, for tomllib): ``python scripts/check_floors.py PYPROJECT SECTION...``,
a section being ``dependencies`` or an extra's name; exit 1 when a floor there is not met.
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from packaging.requirements import Requirement
from packaging.version import Version


def declared(pyproject: Path, sections: list[str]) -> list[tuple[str, Requirement]]:
    """(where, requirement) for every requirement of ``sections`` with a ``>=`` floor, self-references left out."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    extras = project.get("optional-dependencies", {})
    found: list[tuple[str, Requirement]] = []
    for section in sections:
        if section == "dependencies":
            found += [("dependencies", Requirement(r)) for r in project.get("dependencies", [])]
        elif section in extras:
            found += [(f"[{section}]", Requirement(r)) for r in extras[section]]
        else:
            raise SystemExit(f"{pyproject}: no extra named {section!r}")
    return [(where, r) for where, r in found if r.name != project["name"] and _floor(r) is not None]


def _floor(requirement: Requirement) -> Version | None:
    floors = [Version(s.version) for s in requirement.specifier if s.operator == ">="]
    return max(floors) if floors else None


def main(argv: list[str]) -> int:
    pyproject = Path(argv[1])
    wanted = declared(pyproject, argv[2:])
    wrong = 0
    for where, requirement in wanted:
        floor = _floor(requirement)
        assert floor is not None
        try:
            installed = Version(version(requirement.name))
        except PackageNotFoundError:
            print(f"{pyproject}: {where} {requirement}: not installed")
            wrong += 1
            continue
        if installed != floor:
            print(f"{pyproject}: {where} {requirement}: installed {installed}, not the floor {floor}: raise the floor")
            wrong += 1
    print(f"floors ({', '.join(argv[2:])}): {len(wanted) - wrong} of {len(wanted)} lower bounds installed exactly")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
