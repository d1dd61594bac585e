"""sizes.py: the byte sizes bench/'s scripts take on their command lines ("64", "4K", "64M",
"1G", either case), one parser for all of them. Standard library only, so that every script can
import it from its own folder."""


def size_arg(s: str) -> int:
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    unit = s[-1:].upper()
    return int(s[:-1]) * mult[unit] if unit in mult else int(s)
