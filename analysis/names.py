"""Kernel names short enough to read.

A CUDA kernel's demangled name carries its whole template and parameter
list: PyTorch's fused Adam step is over 500 characters, most of them
`at::native::(anonymous namespace)::` and `float const*`. Findings, axes
and tables show the short form Nsight Systems calls the "short name": the
function without its parameter list, template arguments, `void ` or
anonymous namespaces, each dropped only while the name is still too long.
The full name stays in the data (JSON reports, query results, hovers).
"""

from __future__ import annotations

ELLIPSIS = "…"


def short_kernel_name(name: str, limit: int = 60) -> str:
    """`name` in at most `limit` characters: the parameter list goes first,
    then the template arguments, then `void ` and `(anonymous namespace)::`,
    and whatever is still too long is cut with `…`. Names that fit are
    returned as they are."""
    base = name.strip()
    if len(base) <= limit:
        return base
    base = _without_parameters(base)
    if len(base) > limit:
        base = _without_template_arguments(base)
    base = base.removeprefix("void ").replace("(anonymous namespace)::", "").strip()
    return base if len(base) <= limit else base[: limit - 1] + ELLIPSIS


def unique_short_names(names: list[str], limit: int = 60) -> list[str]:
    """`short_kernel_name` of each, numbered from the second time a label
    comes out again (`multi_tensor_apply_kernel (2)`): two kernels whose
    names differ only in what was dropped, or one listed twice, never share
    a bar or a row label."""
    seen: dict[str, int] = {}
    labels = []
    for name in names:
        label = short_kernel_name(name, limit)
        seen[label] = seen.get(label, 0) + 1
        labels.append(label if seen[label] == 1 else f"{label} ({seen[label]})")
    return labels


def _without_parameters(name: str) -> str:
    """`name` less a trailing parenthesised parameter list, if it has one."""
    if not name.endswith(")"):
        return name
    depth = 0
    for at in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[at], 0)
        if depth == 0:
            return name[:at].rstrip() if at > 0 else name
    return name


def _without_template_arguments(name: str) -> str:
    """`name` less everything between matching angle brackets (an arrow,
    `->`, inside a name is not a bracket)."""
    kept: list[str] = []
    depth = 0
    previous = ""
    for char in name:
        if char == "<":
            depth += 1
        elif char == ">" and previous != "-" and depth > 0:
            depth -= 1
        elif depth == 0:
            kept.append(char)
        previous = char
    return "".join(kept)
