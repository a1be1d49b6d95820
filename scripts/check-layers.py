#!/usr/bin/env python3
"""No include runs upward: between the project's folders, and between costmodel's rooms.

The folders (README's layout table) and what each may include:
  costmodel  <  sim, kernels  <  search, backend  <  launch  <  validate  <  report  <  cli, python
(launch: spawning processes, splitting search and sweep over MPI ranks; validate runs
the backend in its own process, the job it runs costmodel's scaled job)
and inside costmodel/ and backend/ the rooms, lowest first (ROOMS below): a file in one
room may include headers of its own room and of the rooms beneath it, never above. SimGrid is
private to sim/ (and cli's --version), LibTorch to backend/ and kernels/ (and the runner's
cli files, which link the backend).

Usage: scripts/check-layers.py [ROOT]    exit 0 when every include is allowed; otherwise
one line per offending include (file:line: what and why) and exit 1.
"""
import pathlib
import re
import sys

# The rooms of costmodel/ and backend/, lowest first: a reader guesses from the folder
# where a rule lives. backend/: the parallel layers and their groups, the model built from
# them, and what runs it (executor, trainer, processes, checkpoints).
ROOMS = {
    "costmodel": ["base", "spec", "plan", "cost", "program", "estimate", "scenario"],
    "backend": ["parallel", "model", "runtime"],
}
# What may stand beside a folder's rooms: backend/tools (programs over the library).
BESIDE_ROOMS = {"backend": {"tools"}}

# Which project folders each folder's sources may include (itself always).
FOLDERS = {
    "costmodel": set(),
    "sim": {"costmodel"},
    "kernels": {"costmodel"},
    "search": {"costmodel", "sim"},
    "backend": {"costmodel", "kernels"},
    "launch": {"costmodel", "sim", "search"},
    "validate": {"costmodel", "sim", "search", "launch"},
    "report": {"costmodel", "sim", "search", "launch", "validate"},
    "cli": {"costmodel", "sim", "search", "kernels", "backend", "launch", "validate", "report"},
    "python": {"costmodel", "sim", "search", "launch", "validate", "report"},
}
# Third-party headers only some folders may include.
PRIVATE = {
    "simgrid/": {"sim", "cli"},
    "torch/": {"backend", "kernels", "cli"},
    "ATen/": {"backend", "kernels"},
    "c10/": {"backend", "kernels"},
}
SOURCES = (".cpp", ".hpp", ".h", ".cu", ".cuh")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


def project_files(root, folder):
    base = root / folder
    return sorted(p for p in base.rglob("*") if p.suffix in SOURCES and p.is_file()) if base.is_dir() else []


def folder_rooms(root, folder):
    """Every header's room in `folder`, by file name (names are unique across rooms)."""
    rooms, problems = {}, []
    for room in ROOMS[folder]:
        for p in project_files(root, f"{folder}/{room}"):
            if p.suffix in (".hpp", ".h"):
                if p.name in rooms:
                    problems.append(f"{p}: header name also in room '{rooms[p.name]}'")
                rooms[p.name] = room
    for p in project_files(root, folder):
        rel = p.relative_to(root / folder)
        if rel.parts[0] not in ROOMS[folder] and rel.parts[0] not in BESIDE_ROOMS.get(folder, set()):
            problems.append(f"{p}: outside {folder}'s rooms ({', '.join(ROOMS[folder])})")
    return rooms, problems


def check_file(root, folder, path, rooms):
    problems = []
    order = ROOMS.get(folder, [])
    room = path.relative_to(root / folder).parts[0] if order else None
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        m = INCLUDE.match(line)
        if not m:
            continue
        target = m.group(1)
        where = f"{path.relative_to(root)}:{number}"
        parts = target.split("/")
        if len(parts) >= 3 and parts[0] == "partune":
            other = parts[1]
            if other != folder and other not in FOLDERS.get(folder, set()):
                problems.append(f"{where}: {folder}/ includes {target}: {other}/ is not beneath {folder}/")
        for prefix, allowed in PRIVATE.items():
            if target.startswith(prefix) and folder not in allowed:
                problems.append(f"{where}: {folder}/ includes {target}: private to {', '.join(sorted(allowed))}")
        name = parts[-1]
        if room in order and name in rooms and (len(parts) == 1 or parts[:2] == ["partune", folder]):
            if order.index(rooms[name]) > order.index(room):
                problems.append(f"{where}: room '{room}' includes {target} of the higher room '{rooms[name]}'")
    return problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    rooms, problems = {}, []
    for folder in ROOMS:
        rooms[folder], found = folder_rooms(root, folder) if (root / folder).is_dir() else ({}, [])
        problems += found
    for folder in FOLDERS:
        for path in project_files(root, folder):
            problems += check_file(root, folder, path, rooms.get(folder, {}))
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} include(s) run upward or across")
        return 1
    counts = "; ".join(f"{len(rooms[f])} {f} headers in {len(ROOMS[f])} rooms" for f in ROOMS)
    print(f"check-layers: {counts}; no include runs upward")
    return 0


if __name__ == "__main__":
    sys.exit(main())
