#!/usr/bin/env python3
"""docs/development.md's file list, made from the tree: every source file of the repository's
folders with the first sentence of its own header comment.

`python3 scripts/layout.py` prints the list, `write` puts it into docs/development.md between its
markers, `check` (run by `make lint`) fails when the doc's list is not the tree's, when a file has
no header comment, or when a file the doc's "How it is built" names in backticks is not in the
tree.
"""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "development.md"
BEGIN = "<!-- layout: scripts/layout.py writes this list; `make layout` after adding a file -->"
END = "<!-- /layout -->"

# The folders listed, in order, with the files they hold (their subfolders too).
FOLDERS = [
    "src",
    "core/src",
    "tests",
    "testkit/src",
    "testkit/python/slidingwindow_testkit",
    "clients/rust/src",
    "clients/python/slidingwindow",
    "clients/node",
    "clients/go",
    "services/common/src",
    "services/gateway/src",
    "services/envoy-ratelimit/src",
    "bench/src",
    "fuzz/fuzz_targets",
    "scripts",
]
SOURCES = (".rs", ".py", ".js", ".go", ".sh")


def tracked():
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    return out.stdout.split()


def listed(path):
    """Whether the list shows `path`: a source file, not a test of a client or a file of a suite
    folder other than its main.rs."""
    if not path.endswith(SOURCES) or "/node_modules/" in path:
        return False
    if path.startswith("clients/") and ("/test/" in path or "/tests/" in path or path.endswith("_test.go")):
        return False
    if path.startswith("clients/go/internal/testredis/"):
        return False
    parts = path.split("/")
    if parts[0] == "tests":
        # A suite is a file, or a folder whose main.rs says what it holds.
        return len(parts) == 2 or (len(parts) == 3 and parts[2] == "main.rs")
    return True


def header(path):
    """The file's own header comment as one line of text ("" when it has none)."""
    text = (ROOT / path).read_text(encoding="utf-8")
    lines = text.splitlines()
    if path.endswith(".py"):
        try:
            return " ".join((ast.get_docstring(ast.parse(text)) or "").split())
        except SyntaxError:
            return ""
    if path.endswith(".rs"):
        doc = [l[3:] for l in lines if l.startswith("//!")]
        if not doc:
            doc = [l[2:] for l in lines[: next((i for i, l in enumerate(lines) if not l.startswith("//")), 0)]]
        return " ".join(" ".join(doc).split())
    if path.endswith(".sh"):
        doc = []
        for l in lines[1:] if lines and lines[0].startswith("#!") else lines:
            if not l.startswith("#"):
                break
            doc.append(l.lstrip("#"))
        return " ".join(" ".join(doc).split())
    if path.endswith(".go"):
        # The comment just above `package` (the file's or the package's doc), else the file's first.
        i = next((i for i, l in enumerate(lines) if l.startswith("package ")), 0)
        doc = []
        j = i - 1
        while j >= 0 and lines[j].startswith("//"):
            doc.insert(0, lines[j][2:])
            j -= 1
        if not doc:
            k = next((k for k, l in enumerate(lines) if l.startswith("//") and not l.startswith("//go:")), None)
            while k is not None and k < len(lines) and lines[k].startswith("//"):
                doc.append(lines[k][2:])
                k += 1
        return " ".join(" ".join(doc).split())
    # .js: the first run of // lines after 'use strict'.
    doc = []
    for l in lines:
        s = l.strip()
        if not doc and (s in ("", "'use strict';", '"use strict";') or s.startswith("#!")):
            continue
        if not s.startswith("//"):
            break
        doc.append(s[2:])
    return " ".join(" ".join(doc).split())


def first_sentence(text):
    """Up to the first full stop that ends a sentence (not "e.g.", "...", nor a file name's dot)."""
    m = re.search(r"(?<!e\.g)(?<!i\.e)(?<!etc)(?<!\.)\.(\s|$)", text)
    return text[: m.start() + 1] if m else text


def render():
    files = sorted(p for p in tracked() if listed(p))
    out, bare = [], []
    for folder in FOLDERS:
        rows = [p for p in files if p.startswith(folder + "/")]
        if not rows:
            continue
        out.append(f"\n`{folder}/`\n\n| file | what it holds |\n|---|---|")
        for p in rows:
            h = header(p)
            if not h:
                bare.append(p)
            cell = first_sentence(h).replace("|", "\\|")
            out.append(f"| `{p[len(folder) + 1:]}` | {cell} |")
    return "\n".join(out).lstrip("\n") + "\n", bare


def stale_names(doc):
    """Files the doc's "How it is built" names in backticks that no tracked file ends with."""
    section = doc[doc.index("## How it is built") : doc.index(BEGIN)]
    paths = tracked()
    names = set(re.findall(r"`([\w./-]+\.(?:rs|py|js|go|sh|json|md|lua|toml))`", section))
    return sorted(n for n in names if not any(p == n or p.endswith("/" + n) for p in paths))


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else "print"
    text, bare = render()
    if what == "print":
        sys.stdout.write(text)
        return 0
    doc = DOC.read_text(encoding="utf-8")
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    new = f"{head}{BEGIN}\n{text}{END}{tail}"
    if what == "write":
        DOC.write_text(new, encoding="utf-8")
        return 0
    problems = []
    if not rest:
        problems.append(f"docs/development.md has no {BEGIN}")
    elif new != doc:
        problems.append("docs/development.md's file list is not the tree's: run `make layout`")
    problems += [f"{p}: no header comment saying what the file holds" for p in bare]
    problems += [f"docs/development.md names `{n}`, which is not in the tree" for n in stale_names(doc)]
    for p in problems:
        print(f"layout: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
