#!/usr/bin/env python3
"""Prints which modules of src/ use which, and fails if any two depend on each other, directly or
through others, or if a file outside the `pg` boundary does not forbid `unsafe` code. A module is
a file under src/ or a folder with its mod.rs; lib.rs, which wires them all, and the test module
are left out of the graph. `make lint` runs this; an argument names another src/."""
import pathlib
import re
import sys

SRC = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent / "src")
LEFT_OUT = {"lib", "pg_tests"}
# Where hand-written `unsafe` may be: the boundary, the crate root that wires it, and the SQL
# functions' module, which denies it and allows it item by item.
UNSAFE_ALLOWED = {"pg", "lib"}
DENIES_UNSAFE = {"functions"}


def module_of(path: pathlib.Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".rs")


def uses() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in sorted(SRC.rglob("*.rs")):
        module = module_of(path)
        if module in LEFT_OUT:
            continue
        text = path.read_text()
        used = set(re.findall(r"\bcrate::([a-z_]+)", text))
        # `use crate::{a, b::c}` names several modules at once.
        for group in re.findall(r"\bcrate::\{([^}]*)\}", text):
            used |= {name.strip().split("::")[0] for name in group.split(",") if name.strip()}
        graph.setdefault(module, set()).update(used - {module} - LEFT_OUT)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}
    path: list[str] = []

    def visit(module: str) -> list[str] | None:
        state[module] = "open"
        path.append(module)
        for used in sorted(graph.get(module, ())):
            if state.get(used) == "open":
                return path[path.index(used):] + [used]
            if used not in state and (found := visit(used)):
                return found
        state[module] = "done"
        path.pop()
        return None

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return None


def files_allowing_unsafe() -> list[str]:
    """Files outside the boundary without the lint attribute their module must carry."""
    missing = []
    for path in sorted(SRC.rglob("*.rs")):
        module = module_of(path)
        if module in UNSAFE_ALLOWED:
            continue
        wanted = "#![deny(unsafe_code)]" if module in DENIES_UNSAFE else "#![forbid(unsafe_code)]"
        if wanted not in path.read_text():
            missing.append(f"{path.relative_to(SRC)} (needs {wanted})")
    return missing


def main() -> int:
    graph = uses()
    for module, used in sorted(graph.items()):
        print(f"{module:12} uses {', '.join(sorted(used)) or '-'}")
    failed = 0
    found = cycle(graph)
    if found:
        print("module-deps: a dependency cycle: " + " -> ".join(found), file=sys.stderr)
        failed = 1
    for file in files_allowing_unsafe():
        print(f"module-deps: unsafe code is not forbidden in {file}", file=sys.stderr)
        failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
