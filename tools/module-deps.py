#!/usr/bin/env python3
"""Prints which modules of src/ use which, and fails if any two depend on each other, directly or
through others, if a file outside the `pg` boundary does not forbid `unsafe` code, or if
docs/architecture.md's map of the modules is not true to src/. A module is a file under src/ or a
folder with its mod.rs; lib.rs, which wires them all, and the test module are left out of the
graph. `make lint` runs this; arguments name another src/ and another architecture page."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "src"
ARCHITECTURE = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else ROOT / "docs" / "architecture.md"
LEFT_OUT = {"lib", "pg_tests"}
# Where hand-written `unsafe` may be: the boundary and the crate root that wires it. The SQL
# functions' module denies it, and allows it only on the items the boundary's entry macros write.
UNSAFE_ALLOWED = {"pg", "lib"}
DENIES_UNSAFE = {"functions", "key"}


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
    """Files outside the boundary without the lint attribute their module must carry, or with
    `unsafe` written in their code (comments aside): the boundary's macros write the only items
    that allow it there."""
    missing = []
    for path in sorted(SRC.rglob("*.rs")):
        module = module_of(path)
        if module in UNSAFE_ALLOWED:
            continue
        text = path.read_text()
        wanted = "#![deny(unsafe_code)]" if module in DENIES_UNSAFE else "#![forbid(unsafe_code)]"
        # A file of a module that denies `unsafe` may forbid it outright.
        if wanted not in text and "#![forbid(unsafe_code)]" not in text:
            missing.append(f"{path.relative_to(SRC)} (needs {wanted})")
        for number, line in enumerate(text.splitlines(), 1):
            if re.search(r"\bunsafe\b", line.split("//", 1)[0]):
                missing.append(f"{path.relative_to(SRC)}:{number} (writes unsafe outside src/pg/)")
    return missing


def modules() -> dict[str, list[str]]:
    """Every module of src/, with the files of a folder module other than its mod.rs."""
    found: dict[str, list[str]] = {}
    for path in sorted(SRC.iterdir()):
        if path.is_dir():
            found[path.name] = sorted(file.name for file in path.glob("*.rs") if file.name != "mod.rs")
        elif path.suffix == ".rs":
            found[path.stem] = []
    return found


def doc_map() -> tuple[set[str], dict[str, tuple[str, str]]]:
    """The modules on the lines of the architecture page's diagram, and its table's rows: each
    module's `owns` and `uses` cells."""
    text = ARCHITECTURE.read_text()
    section = text.split("## The modules of the extension", 1)[1].split("\n## ", 1)[0]
    diagram = section.split("```", 2)[1]
    # Each line of the diagram: the modules of one level, then what they do, from one column on.
    lines = [line for line in diagram.splitlines() if line.strip()]
    column = re.match(r"\S+ +", lines[0]).end()
    layered = {name for line in lines for name in line[:column].split()}
    rows: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        row = re.fullmatch(r"\| `([a-z_]+)(?:\.rs|/)` \| (.*) \| (.*) \|", line)
        if row:
            rows[row[1]] = (row[2], row[3])
    return layered, rows


def doc_mismatches(graph: dict[str, set[str]]) -> list[str]:
    """Where the architecture page's map of the modules says other than src/."""
    found = modules()
    layered, rows = doc_map()
    problems = []
    for module in sorted(set(found) - set(rows)):
        problems.append(f"{module} has no row in the table")
    for module in sorted(set(rows) - set(found)):
        problems.append(f"the table has a row for {module}, which is not in src/")
    for module in sorted(set(graph) - layered):
        problems.append(f"{module} is on no line of the diagram")
    for module in sorted(layered - set(graph)):
        problems.append(f"the diagram names {module}, which is not a module of src/")
    for module, (owns, uses) in sorted(rows.items()):
        for file in found.get(module, []):
            if f"`{file}`" not in owns:
                problems.append(f"{module}/{file} is not named in its module's row")
        if module in graph:
            said = set(re.findall(r"[a-z_]+", re.sub(r"\([^)]*\)", "", uses)))
            if said != graph[module]:
                problems.append(
                    f"the row of {module} says it uses {', '.join(sorted(said)) or '-'}; "
                    f"it uses {', '.join(sorted(graph[module])) or '-'}"
                )
    return problems


def main() -> int:
    graph = uses()
    for module, used in sorted(graph.items()):
        print(f"{module:16} uses {', '.join(sorted(used)) or '-'}")
    failed = 0
    found = cycle(graph)
    if found:
        print("module-deps: a dependency cycle: " + " -> ".join(found), file=sys.stderr)
        failed = 1
    for file in files_allowing_unsafe():
        print(f"module-deps: unsafe code is not forbidden in {file}", file=sys.stderr)
        failed = 1
    for problem in doc_mismatches(graph):
        print(f"module-deps: {ARCHITECTURE.name}: {problem}", file=sys.stderr)
        failed = 1
    return failed


if __name__ == "__main__":
    sys.exit(main())
