"""Byte sizes as the benchmarks' flags take them and as their tables print them."""

from __future__ import annotations

KIB = 1024
MIB = 1024 * KIB
GIB = 1024 * MIB


def parse_size(text: str) -> int:
    """'4', '16K', '1M', '256M', '1G' -> bytes (binary units)."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    units = {"K": KIB, "M": MIB, "G": GIB}
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def parse_sizes(text: str) -> list[int]:
    """A comma-separated list of sizes ('4,1K,1M') -> bytes."""
    return [parse_size(s) for s in text.split(",") if s.strip()]


def format_size(n: int) -> str:
    """4 -> '4 B', 4096 -> '4 KiB'; a size that is no whole unit stays in the unit below."""
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def powers_of_four(first: int, last: int) -> list[int]:
    """first, 4 first, 16 first, ... up to last: the default size sweeps."""
    sizes = []
    n = first
    while n <= last:
        sizes.append(n)
        n *= 4
    return sizes
