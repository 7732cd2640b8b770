"""Bad configs stop the service before it listens: exit status 2, and one line naming the file
and the path inside it. A directory loads every *.yaml/*.yml file in it."""

from __future__ import annotations

import subprocess

import pytest

from conftest import Service, service_binary, write_config

BAD = [
    ("descriptors: []\n", "domain: a non-empty domain is required"),
    ("domain: d\ndescriptors:\n  - value: v\n", "descriptors[0]: a descriptor needs a non-empty key"),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: month, requests_per_unit: 1}\n",
        'descriptors[0].rate_limit.unit: unknown unit "month": expected second, minute, hour, day or week'
        " (a rolling window needs a fixed length: use day or week)",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    descriptors:\n      - key: j\n"
        "        rate_limit: {unit: second, requests_per_unit: many}\n",
        "descriptors[0].descriptors[0].rate_limit.requests_per_unit: expected an integer from 0 to 4294967295",
    ),
    (
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second}\n",
        "descriptors[0].rate_limit.requests_per_unit: required",
    ),
    ("domain: d\ndescriptors:\n  - key: k\n    rate_limt: {}\n", "descriptors[0].rate_limt: unknown field"),
    ("domain: d\ndescriptors: {key: k}\n", "descriptors: expected a list, found a mapping"),
    ("domain: d\ndescriptors:\n  - key: k\n  - key: k\n", 'descriptors[1]: another descriptor at this level'),
    ("domain: [d\n", "while parsing"),
]


def run(config) -> subprocess.CompletedProcess:
    return subprocess.run(
        [service_binary(), "--config", str(config), "--listen", "127.0.0.1:0", "--redis", "redis://127.0.0.1:1"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30,
    )


@pytest.mark.parametrize("text,message", BAD)
def test_bad_config_exits_naming_file_and_path(tmp_path, text, message):
    path = write_config(tmp_path, text, "bad.yaml")
    p = run(path)
    assert p.returncode == 2, p.stderr
    assert p.stdout == ""
    assert p.stderr.startswith(f"envoy-ratelimit: config error: {path}: "), p.stderr
    assert message in p.stderr


def test_directory_duplicate_domain_names_both_files(tmp_path):
    write_config(tmp_path, "domain: d\n", "a.yaml")
    write_config(tmp_path, "domain: d\n", "b.yml")
    p = run(tmp_path)
    assert p.returncode == 2
    assert f"{tmp_path / 'b.yml'}: domain: domain \"d\" is already defined in {tmp_path / 'a.yaml'}" in p.stderr


def test_missing_file_and_empty_directory(tmp_path):
    p = run(tmp_path / "nope.yaml")
    assert p.returncode == 2 and f"{tmp_path / 'nope.yaml'}: " in p.stderr
    (tmp_path / "empty").mkdir()
    p = run(tmp_path / "empty")
    assert p.returncode == 2 and "no *.yaml or *.yml file in this directory" in p.stderr


def test_directory_loads_every_file_and_warns_once_about_ignored_fields(tmp_path, redis_server, r):
    write_config(tmp_path, "domain: a\ndescriptors:\n  - key: k\n    detailed_metric: true\n"
                 "    rate_limit: {unit: second, requests_per_unit: 1}\n", "a.yaml")
    write_config(tmp_path, "domain: b\ndescriptors:\n  - key: k\n"
                 "    rate_limit: {unit: minute, requests_per_unit: 2, replaces: [{name: x}]}\n", "b.yaml")
    write_config(tmp_path, "not: [yaml", "notes.txt")
    s = Service(tmp_path, redis_server.url)
    try:
        assert s.ask("a", [("k", "v")]).statuses[0].current_limit.requests_per_unit == 1
        assert s.ask("b", [("k", "v")]).statuses[0].current_limit.requests_per_unit == 2
    finally:
        err = s.close()
    warnings = [line for line in err.splitlines() if "warning" in line]
    assert warnings == [
        "envoy-ratelimit: warning: ignoring fields this service does not implement: "
        f"{tmp_path / 'a.yaml'}: descriptors[0].detailed_metric, {tmp_path / 'b.yaml'}: descriptors[0].rate_limit.replaces"
    ]
