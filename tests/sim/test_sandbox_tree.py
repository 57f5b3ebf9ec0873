"""A simulated sandbox's file tree: paths stay inside it, snapshots and forks copy it, nothing outlives its owner."""

from __future__ import annotations

import gc
import subprocess
import sys
from pathlib import Path

import pytest

from providers.sim.core.sandbox_state.sandbox_tree import SandboxPathError, SandboxTrees, SandboxUser

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def trees(tmp_path: Path) -> SandboxTrees:
    return SandboxTrees(tmp_path / "trees")


def test_relative_paths_start_in_the_users_home_and_dotdot_stops_at_root(trees: SandboxTrees) -> None:
    tree = trees.get("sb-1", SandboxUser())
    assert tree.host_path("notes.txt") == tree.root / "home/user/notes.txt"
    assert tree.host_path("../../../../../etc/passwd") == tree.root / "etc/passwd"
    assert "user:x:1000:1000" in (tree.root / "etc/passwd").read_text()


def test_an_absolute_symlink_inside_the_tree_names_the_sandboxes_root_not_the_hosts(trees: SandboxTrees) -> None:
    tree = trees.get("sb-1", SandboxUser())
    (tree.root / "home/user/etc-link").symlink_to("/etc")
    assert tree.host_path("etc-link/hostname") == tree.root / "etc/hostname"
    assert tree.host_path("etc-link", follow_last=False) == tree.root / "home/user/etc-link"


def test_a_symlink_loop_is_refused_not_followed_forever(trees: SandboxTrees) -> None:
    tree = trees.get("sb-1", SandboxUser())
    (tree.root / "home/user/loop").symlink_to("loop")
    with pytest.raises(SandboxPathError, match="symbolic links"):
        tree.host_path("loop/x")


def test_system_folders_are_the_hosts_and_refuse_writes(trees: SandboxTrees) -> None:
    tree = trees.get("sb-1", SandboxUser())
    assert tree.host_path("/usr/bin").is_dir()
    with pytest.raises(SandboxPathError, match="Read-only"):
        tree.writable("/usr/local/new-file")


def test_a_snapshot_and_a_fork_copy_the_files_and_then_live_apart(trees: SandboxTrees) -> None:
    user = SandboxUser()
    source = trees.get("sb-1", user)
    source.host_path("state.json").write_text("v1")
    trees.save("sb-1", "snap-1", user)
    fork = trees.copy("sb-1", "sb-2", user)
    restored = trees.restore("snap-1", "sb-3", user)
    source.host_path("state.json").write_text("v2")
    assert fork.host_path("state.json").read_text() == "v1"
    assert restored.host_path("state.json").read_text() == "v1"
    trees.remove("sb-1")
    assert not source.root.exists() and trees.has_snapshot("snap-1")


def test_closing_removes_every_tree_and_snapshot(tmp_path: Path) -> None:
    trees = SandboxTrees()
    trees.get("sb-1", SandboxUser.root()).host_path("/root/x").write_text("x")
    trees.save("sb-1", "snap", SandboxUser.root())
    base = trees.base
    trees.close()
    assert not base.exists()


def test_a_simulators_trees_go_when_it_is_dropped_without_close() -> None:
    trees = SandboxTrees()
    trees.get("sb-1", SandboxUser.root()).host_path("/root/x").write_text("x")
    base = trees.base
    del trees
    gc.collect()
    assert not base.exists()


def test_a_process_that_exits_without_close_leaves_no_trees(tmp_path: Path) -> None:
    script = (
        "from providers.sim.core.sandbox_state.sandbox_tree import SandboxTrees, SandboxUser\n"
        "keep = SandboxTrees()\n"
        "keep.get('sb-1', SandboxUser.root()).host_path('/tmp/x').write_text('x')\n"
        "print(keep.base)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    base = Path(out.stdout.strip())
    assert base.name.startswith("stampede-sandboxes-")
    assert not base.exists()
