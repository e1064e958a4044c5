#!/usr/bin/env python3
"""Finds import circles between the files of each crate of the workspace.

A file imports another when it names an item defined there through a path:
`use crate::a::b::C`, `super::x`, `self::x`, a child module's name, or such a
path in code (`crate::a::f()`). A `pub use` that re-exports a child's items
is a facade, not an import: a path through it leads to the file that defines
the item. Tests (`tests.rs`, `tests/` folders, inline `mod tests { … }`) are
left out. Prints each circle and
exits 1 if there is one; prints the crates checked and exits 0 otherwise.

usage: scripts/import_circles.py [CRATE_DIR ...]   (default: every crate of the workspace)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATH_RE = re.compile(r"\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)+)")
USE_RE = re.compile(r"(?ms)^\s*(pub(?:\([a-z]+\))?\s+)?use\s+([^;]+);")
MOD_RE = re.compile(r"(?m)^\s*(?:pub(?:\([a-z]+\))?\s+)?mod\s+([a-z_][a-z0-9_]*)\s*;")


def crates():
    out = []
    for base in ("crates", "lambdas"):
        d = os.path.join(ROOT, base)
        if os.path.isdir(d):
            out += [os.path.join(d, c) for c in sorted(os.listdir(d))]
    out += [os.path.join(ROOT, "daemon"), ROOT]
    return [c for c in out if os.path.isfile(os.path.join(c, "Cargo.toml"))]


def strip_tests(text):
    """The text without comments and inline test modules."""
    text = re.sub(r"(?m)//.*$", "", text)
    m = re.search(r"#\[cfg\(test\)\]\s*(pub\s+)?mod\s+\w+\s*\{", text)
    if m:
        text = text[: m.start()]
    return text


class Crate:
    def __init__(self, root):
        self.src = os.path.join(root, "src")
        self.files = {}  # module path (tuple) -> file
        self.reexports = {}  # module path -> {name: absolute path}, from `pub use`
        for top in ("lib.rs", "main.rs"):
            f = os.path.join(self.src, top)
            if os.path.isfile(f):
                self.walk((), f)
                break

    def walk(self, module, path):
        if any(part == "tests" for part in module):
            return
        self.files[module] = path
        text = strip_tests(open(path).read())
        folder = os.path.dirname(path) if os.path.basename(path) in ("lib.rs", "main.rs", "mod.rs") \
            else os.path.splitext(path)[0]
        for child in MOD_RE.findall(text):
            if child == "tests":
                continue
            for cand in (os.path.join(folder, child + ".rs"), os.path.join(folder, child, "mod.rs")):
                if os.path.isfile(cand):
                    self.walk(module + (child,), cand)
                    break

    def resolve(self, segs, depth=0):
        """The file defining `segs` (an absolute path): its longest module
        prefix, or where that module's `pub use` leads for the next name."""
        for n in range(len(segs), -1, -1):
            module = tuple(segs[:n])
            if module in self.files:
                rest = segs[n:]
                target = self.reexports.get(module, {}).get(rest[0]) if rest else None
                if target is not None and depth < 16:
                    return self.resolve(list(target) + list(rest[1:]), depth + 1)
                return self.files[module]
        return None


def use_paths(tree, prefix=()):
    """The leaf paths of a use tree (`a::{b, c::d}` -> a::b, a::c::d)."""
    tree = tree.strip()
    depth, start, parts = 0, 0, []
    i = tree.find("{")
    if i < 0:
        return [prefix + tuple(p for p in re.split(r"\s*::\s*", tree.split(" as ")[0]) if p)]
    head = tuple(p for p in re.split(r"\s*::\s*", tree[:i]) if p)
    inner = tree[i + 1: tree.rfind("}")]
    for j, ch in enumerate(inner):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(inner[start:j])
            start = j + 1
    parts.append(inner[start:])
    out = []
    for p in parts:
        if p.strip():
            out += use_paths(p, prefix + head)
    return out


def absolute(module, children, segs):
    """`segs` as a path from the crate root, or None outside the crate."""
    if segs[0] == "crate":
        return list(segs[1:])
    if segs[0] == "super":
        up, rest = list(module), list(segs)
        while rest and rest[0] == "super":
            up, rest = up[:-1], rest[1:]
        return up + rest
    if segs[0] == "self":
        return list(module) + list(segs[1:])
    if segs[0] in children:
        return list(module) + list(segs)
    return None




def read_reexports(crate):
    for module, path in crate.files.items():
        text = strip_tests(open(path).read())
        children = set(MOD_RE.findall(text))
        table = {}
        for public, tree in USE_RE.findall(text):
            if not public:
                continue
            for segs in use_paths(tree):
                target = absolute(module, children, segs) if segs else None
                if target and segs[-1] != "*":
                    table[segs[-1]] = target
        crate.reexports[module] = table


def edges(crate):
    read_reexports(crate)
    graph = {}
    for module, path in crate.files.items():
        text = strip_tests(open(path).read())
        children = set(MOD_RE.findall(text))
        targets = set()
        raw = []
        for public, tree in USE_RE.findall(text):
            if not public:  # a `pub use` re-exports: a facade, not an import
                raw += use_paths(tree)
        for m in PATH_RE.finditer(text):
            raw.append((m.group(1),) + tuple(m.group(2).split("::")[1:]))
        for segs in raw:
            segs = [s for i, s in enumerate(segs) if s != "self" or i == 0]
            if not segs:
                continue
            target = absolute(module, children, segs)
            if target is None:
                continue
            f = crate.resolve(target)
            if f and f != path:
                targets.add(f)
        graph[path] = targets
    return graph


def circles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return out


def main():
    roots = [os.path.abspath(a) for a in sys.argv[1:]] or crates()
    found = 0
    for root in roots:
        crate = Crate(root)
        graph = edges(crate)
        for comp in circles(graph):
            found += 1
            print(f"circle in {os.path.relpath(root, ROOT) or '.'}:")
            for f in comp:
                takes = sorted(os.path.relpath(t, ROOT) for t in graph[f] if t in comp)
                print(f"  {os.path.relpath(f, ROOT)} -> {', '.join(takes)}")
    if found:
        print(f"{found} import circle(s)")
        sys.exit(1)
    print(f"no import circle between the files of {len(roots)} crates")


if __name__ == "__main__":
    main()
