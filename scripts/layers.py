#!/usr/bin/env python3
"""Fails when the files of a crate import each other in a circle.

    scripts/layers.py                    # the three crates of the workspace
    scripts/layers.py SRC_DIR ROOT_FILE  # one crate: its src/ and lib.rs or main.rs

A file imports another when it names one of that file's items through a `crate::`,
`super::` or `self::` path, in a `use` declaration or inline, outside its `#[cfg(test)]`
module. A folder's `mod.rs` and the files inside the folder are one floor: the parent
declares and re-exports its children, so an import between them is not counted. Every
circle left is printed with the names that tie it, and the exit status is 1.

Why our own: cargo-modules' acyclic check needs rust-analyzer's crates, minutes of build
on a fresh CI machine for a question a hundred lines answer (docs/design.md, "Where we
wrote our own").
"""
import os
import re
import sys

CRATES = [("src", "lib.rs"), ("quorumlock-cli/src", "main.rs"), ("quorumlock-testkit/src", "lib.rs")]


def module_of(rel, root):
    """The module path of the file at `rel` (relative to the crate's src)."""
    parts = rel[:-3].split(os.sep)
    if parts == [root[:-3]]:
        return ()
    if parts[-1] == "mod":
        return tuple(parts[:-1])
    return tuple(parts)


def code_only(text):
    """`text` with its comments removed and its string and character literals emptied, in
    one pass: a `//` inside a string is not a comment, nor a quote inside a comment a
    string."""
    out, i, n = [], 0, len(text)
    while i < n:
        ch = text[i]
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (ch == "r" or text.startswith("br", i)) and re.match(r"b?r#*\"", text[i:]):
            opening = re.match(r"b?r(#*)\"", text[i:])
            close = '"' + opening.group(1)
            i = text.find(close, i + opening.end())
            i = n if i < 0 else i + len(close)
            out.append('""')
        elif ch == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif ch == "'" and re.match(r"'(?:\\.[^']*|[^\\'])'", text[i:]):
            i += re.match(r"'(?:\\.[^']*|[^\\'])'", text[i:]).end()
            out.append("' '")
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def without_tests_and_comments(text):
    """The file's code without comments, literals' contents and its `#[cfg(test)]` module."""
    text = code_only(text)
    # An inline test module runs to the end of the file by convention; one in a file of
    # its own (`mod tests;`) is a file of its own, which the walk skips (see `circles`).
    test = re.search(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{", text)
    return text[: test.start()] if test else text


def use_paths(tree, prefix=()):
    """Every full path of a `use` tree such as `crate::a::{b, c::{d, e as f}}`."""
    tree = tree.strip()
    depth, start = 0, 0
    brace = None
    for i, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                brace = i
            depth += 1
        elif ch == "}":
            depth -= 1
    if brace is None:
        path = tuple(p for p in re.split(r"\s*::\s*", tree.split(" as ")[0].strip()) if p)
        return [prefix + path]
    head = tuple(p for p in re.split(r"\s*::\s*", tree[:brace].strip()) if p)
    inner = tree[brace + 1 : tree.rfind("}")]
    paths = []
    for i, ch in enumerate(inner + ","):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            item = inner[start:i].strip()
            start = i + 1
            if item:
                paths += use_paths(item, prefix + head)
    return paths


def absolute(path, module):
    """`path` (starting with crate, super or self) as a path from the crate root."""
    base = list(module)
    rest = list(path)
    if rest and rest[0] == "crate":
        return tuple(rest[1:])
    while rest and rest[0] in ("super", "self"):
        if rest.pop(0) == "super":
            base = base[:-1]
    return tuple(base + rest)


def imports(text, module):
    """The crate-relative paths the file names."""
    found = []
    for tree in re.findall(r"\buse\s+((?:crate|super|self)\b[^;]*);", text):
        found += [absolute(p, module) for p in use_paths(tree) if p]
    for path in re.findall(r"\b((?:crate|super|self)(?:\s*::\s*\w+)+)", text):
        found.append(absolute(tuple(re.split(r"\s*::\s*", path)), module))
    return found


def circles(src, root):
    files = {}
    for directory, _, names in os.walk(src):
        for name in names:
            if name.endswith(".rs"):
                rel = os.path.relpath(os.path.join(directory, name), src)
                files[module_of(rel, root)] = rel

    def file_of(path):
        for k in range(len(path), -1, -1):
            if path[:k] in files:
                return path[:k]
        return None

    def one_floor(a, b):
        """A folder's own file and a file inside that folder."""
        return (len(a) < len(b) and b[: len(a)] == a) or (len(b) < len(a) and a[: len(b)] == b)

    edges = {}
    for module, rel in files.items():
        with open(os.path.join(src, rel), encoding="utf-8") as handle:
            text = without_tests_and_comments(handle.read())
        for path in imports(text, module):
            target = file_of(path)
            if target is None or target == module or one_floor(module, target):
                continue
            name = path[len(target)] if len(path) > len(target) else "*"
            edges.setdefault(module, {}).setdefault(target, set()).add(name)

    # Tarjan's strongly connected components: each of more than one file is a circle.
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in edges.get(node, {}):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(10_000)
    for node in sorted(files):
        if node not in index:
            visit(node)
    report = []
    for component in found:
        members = set(component)
        lines = [f"circle: {', '.join(sorted(files[m] for m in members))}"]
        for a in sorted(members):
            for b, names in sorted(edges.get(a, {}).items()):
                if b in members:
                    lines.append(f"  {files[a]} -> {files[b]}: {', '.join(sorted(names))}")
        report.append("\n".join(lines))
    return report


def main():
    crates = [(sys.argv[1], sys.argv[2])] if len(sys.argv) == 3 else CRATES
    failed = False
    for src, root in crates:
        for circle in circles(src, root):
            failed = True
            print(f"{src}: {circle}")
    if not failed:
        print(f"no import circle between files in {', '.join(src for src, _ in crates)}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
