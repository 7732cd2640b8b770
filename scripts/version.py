#!/usr/bin/env python3
"""The release version, kept in one place: `[workspace.package] version` in Cargo.toml.

    python3 scripts/version.py          prints it, after checking that everything agrees with it
    python3 scripts/version.py check    checks only (exit 1 naming each file that differs)
    python3 scripts/version.py set X.Y.Z  writes X.Y.Z to Cargo.toml and every copy below

Copies that must agree (their package formats need a literal version):
  - every workspace crate (from `cargo metadata`), but testkit (test-only, 0.0.0): crates inherit
    with `version.workspace = true`
  - clients/python/pyproject.toml  [project] version
  - clients/node/package.json and package-lock.json  version
  - clients/go/version.go  const Version (the Go module itself is versioned by the tag
    clients/go/vX.Y.Z)
  - CHANGELOG.md  a `## [X.Y.Z]` section
"""

import json
import pathlib
import re
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
UNVERSIONED_CRATES = {"testkit"}
SEMVER = re.compile(r"^\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?$")


def workspace_version() -> str:
    with open(ROOT / "Cargo.toml", "rb") as f:
        return tomllib.load(f)["workspace"]["package"]["version"]


def crate_versions() -> dict[str, tuple[str, str]]:
    out = subprocess.run(
        ["cargo", "metadata", "--no-deps", "--format-version", "1", "--offline"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return {
        p["name"]: (p["version"], p["manifest_path"])
        for p in json.loads(out)["packages"]
        if p["name"] not in UNVERSIONED_CRATES
    }


def python_version() -> str:
    with open(ROOT / "clients/python/pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["version"]


def node_versions() -> dict[str, str]:
    pkg = json.loads((ROOT / "clients/node/package.json").read_text())
    lock = json.loads((ROOT / "clients/node/package-lock.json").read_text())
    return {
        "clients/node/package.json": pkg["version"],
        "clients/node/package-lock.json": lock["version"],
        'clients/node/package-lock.json packages[""]': lock["packages"][""]["version"],
    }


GO_VERSION = re.compile(r'^const Version = "([^"]*)"$', re.M)


def go_version() -> str | None:
    m = GO_VERSION.search((ROOT / "clients/go/version.go").read_text())
    return m.group(1) if m else None


def changelog_has(version: str) -> bool:
    text = (ROOT / "CHANGELOG.md").read_text()
    return re.search(rf"^## \[{re.escape(version)}\]", text, re.M) is not None


def check() -> list[str]:
    want = workspace_version()
    wrong = []
    for name, (have, manifest) in crate_versions().items():
        if have != want:
            rel = pathlib.Path(manifest).relative_to(ROOT)
            wrong.append(f"{rel}: crate {name} is {have} (use version.workspace = true)")
    copies = {"clients/python/pyproject.toml": python_version(), **node_versions()}
    copies["clients/go/version.go"] = go_version()
    for where, have in copies.items():
        if have != want:
            wrong.append(f"{where}: {have}")
    if not changelog_has(want):
        wrong.append(f"CHANGELOG.md: no '## [{want}]' section")
    return [f"version: {w}, Cargo.toml's workspace version is {want}" for w in wrong]


def replace(path: pathlib.Path, pattern: str, new: str, count: int = 1) -> None:
    text = path.read_text()
    changed, n = re.subn(pattern, new, text, count=count, flags=re.M)
    if n != count:
        sys.exit(f"version: {path.relative_to(ROOT)}: pattern {pattern!r} found {n} times")
    path.write_text(changed)


def set_version(new: str) -> None:
    if not SEMVER.match(new):
        sys.exit(f"version: {new!r} is not X.Y.Z")
    replace(ROOT / "Cargo.toml", r'(\[workspace\.package\]\n(?:.*\n)*?version = )"[^"]*"', rf'\g<1>"{new}"')
    replace(ROOT / "clients/python/pyproject.toml", r'^(version = )"[^"]*"', rf'\g<1>"{new}"')
    replace(ROOT / "clients/go/version.go", r'^(const Version = )"[^"]*"', rf'\g<1>"{new}"')
    # The lock's first two versions are its own and packages[""]'s (check() reads them back).
    for name, count in (("package.json", 1), ("package-lock.json", 2)):
        replace(ROOT / "clients/node" / name, r'^(\s*"version": )"[^"]*"', rf'\g<1>"{new}"', count)
    # Cargo.lock's entries for the workspace crates.
    subprocess.run(["cargo", "update", "--workspace", "--offline", "--quiet"], cwd=ROOT, check=True)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["set"] and len(args) == 2:
        set_version(args[1])
    elif args not in ([], ["check"]):
        sys.exit(__doc__)
    wrong = check()
    for line in wrong:
        print(line, file=sys.stderr)
    if wrong:
        sys.exit(1)
    if not args:
        print(workspace_version())


if __name__ == "__main__":
    main()
