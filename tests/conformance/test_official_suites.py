"""A fast slice of the official wheel's own test files, run against pyexecutorch
after the mechanical import rewrite (scripts/conformance.py; the whole run is
``make conformance``).

Each file's count of passing tests must not fall below its floor: the number
measured when the floor was last raised (raise it, never lower it, when more
pass). The slice runs in one pytest process (one interpreter start)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import conformance  # noqa: E402

# Wheel-relative file -> official tests that pass on pyexecutorch, at least.
FLOOR = {
    "devtools/bundled_program/test/test_config.py": 2,
    "devtools/etdump/tests/serialize_test.py": 1,
    "devtools/inspector/tests/vgf_neural_statistics_test.py": 7,
    "devtools/inspector/tests/l1_comparator_test.py": 5,
    "devtools/inspector/tests/mse_comparator_test.py": 5,
    "devtools/inspector/tests/snr_comparator_test.py": 5,
    "exir/program/test/test_fake_program.py": 1,
    "extension/pybindings/test/test_backend_pybinding.py": 2,
}


def test_imports_are_rewritten_and_nothing_else():
    source = (
        "import executorch.exir as exir\n"
        "from executorch.exir import to_edge\n"
        "    from executorch import exir\n"
        'name = "executorch.exir"  # from executorch import x\n'
        "import executorchfoo\n"
        "import executorch\n"
        "  import executorch.backends.test.harness\n"
    )
    assert conformance.rewrite_imports(source) == (
        "import pyexecutorch.exir as exir\n"
        "from pyexecutorch.exir import to_edge\n"
        "    from pyexecutorch import exir\n"
        'name = "executorch.exir"  # from executorch import x\n'
        "import executorchfoo\n"
        "import pyexecutorch as executorch\n"
        "  import pyexecutorch.backends.test.harness; import pyexecutorch as executorch\n"
    )


def test_official_suites_pass_at_least_the_floor(tmp_path):
    wheel = conformance.wheel_root()
    root = conformance.populate(wheel, "ours", tmp_path / "ours")
    results = conformance.run_files(root, list(FLOOR), "ours", timeout=240)
    got = {rel: results[rel].count("passed") for rel in FLOOR}
    failing = {
        rel: sorted(t for t, o in results[rel].outcomes.items() if o != "passed") for rel in FLOOR
    }
    below = {rel: (got[rel], floor) for rel, floor in FLOOR.items() if got[rel] < floor}
    assert not below, f"passing (got, floor) fell: {below}; not passing: {failing}"


def test_deliberate_differences_name_real_tests_and_are_not_counted_as_lost(tmp_path, monkeypatch):
    wheel = conformance.wheel_root()
    private = conformance.load_exclusions()
    # Each listed difference (none at present) names a real official test, and why.
    for test, why in conformance.load_deliberate().items():
        rel, *_, name = test.split("::")
        function = re.sub(r"_\d+$", "", name)  # parameterized.expand's suffix
        assert f"def {function}(" in (wheel / rel).read_text(), test
        assert test not in private and len(why) > 40, test
    rel = "exir/program/test/test_program.py"
    chosen = f"{rel}::TestProgramManagers::test_while"
    other = f"{rel}::TestProgramManagers::test_other"
    # A list naming ``chosen`` as deliberate: counted in its own column.
    listed = tmp_path / "exclusions.toml"
    listed.write_text(
        conformance.EXCLUSIONS.read_text()
        + f'\n[[deliberate]]\ntest = "{chosen}"\nwhy = "an example"\n'
    )
    monkeypatch.setattr(conformance, "EXCLUSIONS", listed)
    assert conformance.load_deliberate() == {chosen: "an example"}
    official = {rel: conformance.FileResult({chosen: "passed", other: "passed"})}
    ours = {rel: conformance.FileResult({chosen: "failed", other: "failed"})}
    row = conformance.table([rel], official, ours).splitlines()[2].split()
    # file, official p/f/e, ours p/f/e, both pass, lost, private, deliberate, seconds
    assert row[3:7] == ["0", "1", "0", "1"], row


def test_populate_updates_a_tree_in_place(tmp_path):
    """A second run repopulating the tree while another runs in it must not take
    files away: only changed files are rewritten, and files the wheel lacks removed."""
    wheel = conformance.wheel_root()
    root = conformance.populate(wheel, "ours", tmp_path / "ours")
    kept = root / "exir/program/test/test_program.py"
    edited = root / "devtools/etdump/tests/serialize_test.py"
    stale = root / "exir/tests/test_gone.py"
    expected = edited.read_text()
    edited.write_text("# edited by hand\n")
    stale.write_text("# no longer in the wheel\n")
    before = kept.stat().st_mtime_ns
    conformance.populate(wheel, "ours", root)
    assert kept.stat().st_mtime_ns == before
    assert edited.read_text() == expected
    assert "from pyexecutorch" in expected and not stale.exists()
