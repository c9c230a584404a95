"""Convert VALUE from one unit to another: convert.py VALUE FROM TO (see ../units.md)."""

import sys

LENGTH = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0, "in": 0.0254, "ft": 0.3048,
          "yd": 0.9144, "mi": 1609.344}  # fmt: skip
MASS = {"g": 0.001, "kg": 1.0, "oz": 0.028349523125, "lb": 0.45359237}
TEMPERATURE = ("C", "F", "K")


def to_celsius(value: float, unit: str) -> float:
    return {"C": value, "F": (value - 32) * 5 / 9, "K": value - 273.15}[unit]


def from_celsius(value: float, unit: str) -> float:
    return {"C": value, "F": value * 9 / 5 + 32, "K": value + 273.15}[unit]


def convert(value: float, source: str, target: str) -> float:
    for table in (LENGTH, MASS):
        if source in table and target in table:
            return value * table[source] / table[target]
    if source in TEMPERATURE and target in TEMPERATURE:
        return from_celsius(to_celsius(value, source), target)
    known = ", ".join([*LENGTH, *MASS, *TEMPERATURE])
    raise ValueError(f"cannot convert {source} to {target}; units of one kind: {known}")


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: convert.py VALUE FROM TO", file=sys.stderr)
        return 2
    try:
        result = convert(float(argv[0]), argv[1], argv[2])
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"{argv[0]} {argv[1]} = {result:.6g} {argv[2]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
