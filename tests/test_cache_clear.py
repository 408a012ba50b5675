"""``cache clear --dir p`` touches only cache entries (issue 40): files named as entries
(``<32 hex>.hlo.txt``, ``.meta.json``, ``.lock``) and this writer's own temporaries; a user's
``model.hlo.txt``, another tool's ``build.lock`` or ``.tmp`` stay. Damaged entries (a folder, a
FIFO, a link, unreadable metadata where a file should be) are removed, and nothing raises."""

from __future__ import annotations

import os
from pathlib import Path

from click.testing import CliRunner

from hlo_roofline import cache, cli

KEY = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"
FOREIGN = ("model.hlo.txt", "model.meta.json", "build.lock", ".other.tmp", "notes.txt",
           f"{KEY[:-1]}.hlo.txt", f"{KEY}.hlo.txt.bak", f"X{KEY}.lock")  # fmt: skip


def _populate(directory: Path) -> None:
    for name in FOREIGN:
        (directory / name).write_text("keep me")
    (directory / f"{KEY}.hlo.txt").mkdir()  # a damaged entry: a folder where the HLO goes
    (directory / f"{KEY}.hlo.txt" / "inside").write_text("x")
    (directory / f"{OTHER}.hlo.txt").write_text("HloModule m\n")
    (directory / f"{OTHER}.meta.json").write_text("{not json")
    os.mkfifo(directory / f"{'1' * 32}.lock")
    (directory / f"{'2' * 32}.meta.json").symlink_to(directory / "notes.txt")
    (directory / ".r.json.999999999.abcdefabcdef.tmp").write_text("a dead writer's")


def test_clear_removes_damaged_entries_and_nothing_else(tmp_path):
    _populate(tmp_path)
    result = CliRunner().invoke(cli.main, ["cache", "clear", "--dir", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FOREIGN)
    assert all((tmp_path / n).read_text() == "keep me" for n in FOREIGN)


def test_prune_and_show_see_only_entries(tmp_path):
    _populate(tmp_path)
    used = cache.usage(tmp_path)
    assert used.entries == 3  # KEY (a folder), OTHER, the linked metadata
    assert cache.prune(tmp_path, 0) >= 2
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(FOREIGN)
    result = CliRunner().invoke(cli.main, ["cache", "show", "--dir", str(tmp_path)])
    assert result.exit_code == 0 and "entries    0" in result.output, result.output


def test_entry_names():
    assert cache.entry_key_of(f"{KEY}.hlo.txt") == KEY
    assert cache.entry_key_of(f"{KEY}.lock") == KEY
    for name in FOREIGN:
        assert cache.entry_key_of(name) is None, name


def test_clear_of_a_folder_it_cannot_read_is_a_message(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "model.hlo.txt").write_text("keep me")
    locked.chmod(0)
    try:
        result = CliRunner().invoke(cli.main, ["cache", "clear", "--dir", str(locked)])
        assert "Traceback" not in result.output
        assert result.exit_code in (0, 2), result.output
    finally:
        locked.chmod(0o755)
    assert (locked / "model.hlo.txt").read_text() == "keep me"
