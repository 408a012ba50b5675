"""A user's commands run from a fresh clone: no doc, fixture README or generator names one
machine's absolute paths (a MaxText venv at a fixed place, a scratch folder, a pyenv), and the
committed dumps record no checkout's path (fixtures/scrub_paths.py rewrites them relative)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "fixtures"))
from scrub_paths import checkout_paths, read_text  # noqa: E402

MACHINE = re.compile(r"/work/|~/\.pyenv/|(?<![\w.$])/tmp/")
WRITTEN = sorted(
    [
        *ROOT.glob("docs/*.md"),
        ROOT / "README.md",
        *ROOT.glob("fixtures/**/README.md"),
        *ROOT.glob("fixtures/**/*.py"),
    ]
)
# Every committed program, dump and record in text: a generator that writes its checkout's path is
# caught here (`python fixtures/scrub_paths.py fixtures` rewrites them relative). The profiler's
# binary traces (``*.xplane.pb.gz``) are left as the device recorded them: a path inside a protobuf
# is a length-prefixed field the scrub cannot rewrite in place.
DATA = sorted(
    f
    for f in (ROOT / "fixtures").rglob("*")
    if f.is_file()
    and f.suffix in (".txt", ".gz", ".json", ".pbtxt")
    and not f.name.endswith(".pb.gz")
)


@pytest.mark.parametrize("path", WRITTEN, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_machine_path_in_what_people_read(path):
    found = [
        f"{i}: {line.strip()}"
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if MACHINE.search(line)
    ]
    assert not found, found


@pytest.mark.parametrize("path", DATA, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_checkout_path_in_committed_programs(path):
    assert not checkout_paths(read_text(path))


def test_the_scrub_finds_and_rewrites_a_checkout_path():
    from scrub_paths import scrubbed

    text = '1 "/work/wt/x/fixtures/g.py"\n2 "/v/lib/python3.12/site-packages/jax/a.py"\n'
    assert checkout_paths(text) == ["/work/wt/x/"]
    assert scrubbed(text) == '1 "fixtures/g.py"\n2 "/v/lib/python3.12/site-packages/jax/a.py"\n'
