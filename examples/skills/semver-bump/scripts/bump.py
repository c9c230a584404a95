"""Print the next version: bump.py VERSION major|minor|patch (see ../rules.md)."""

import re
import sys

VERSION = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(?:-([0-9A-Za-z.-]+))?")


def bump(version: str, kind: str) -> str:
    match = VERSION.fullmatch(version.removeprefix("v"))
    if match is None:
        raise ValueError(f"{version!r} is not a semantic version such as 1.4.2")
    major, minor, patch = (int(g) for g in match.groups()[:3])
    if match.group(4):  # a pre-release: the bump of its own kind releases it
        if kind == "patch" or (kind == "minor" and patch == 0):
            return f"{major}.{minor}.{patch}"
        if kind == "major" and minor == patch == 0:
            return f"{major}.0.0"
    if kind == "major":
        return f"{major}.{minor + 1}.0" if major == 0 else f"{major + 1}.0.0"
    if kind == "minor":
        return f"{major}.{minor + 1}.0"
    if kind == "patch":
        return f"{major}.{minor}.{patch + 1}"
    raise ValueError(f"{kind!r} is not major, minor or patch")


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: bump.py VERSION major|minor|patch", file=sys.stderr)
        return 2
    try:
        print(bump(argv[0], argv[1]))
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
