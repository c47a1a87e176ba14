"""Conformance harness: the official executorch wheel's own test files, run against
pyexecutorch after a mechanical import rewrite, beside the official package's
results on the very same files.

    python scripts/conformance.py                 # every suite file, table on stdout
    python scripts/conformance.py --files devtools/etdump/tests/serialize_test.py
    python scripts/conformance.py --json out.json # per-test outcomes as well

What it does, and nothing more:

1. copies the wheel's test files (every ``.py`` under ``executorch/<scope>`` with a
   path component starting with ``test``; the helpers the suites import live there
   too) into ``.cache/conformance/{official,ours}/``;
2. in the ``ours`` copy, rewrites ``from executorch`` / ``import executorch`` to
   ``pyexecutorch`` on import lines only (a bare ``import executorch[.x]`` also binds
   the name ``executorch`` to ``pyexecutorch``, as a user porting such code would);
   no other line is touched;
3. runs each suite file in its own pytest process (``ours`` with
   scripts/conformance_overlay.py mounting the copied helpers under
   ``pyexecutorch``) and reads the outcomes from its JUnit XML;
4. prints per file: passed/failed/errors for the official package and for ours,
   how many official passes we pass, how many of the rest read an official
   private member, and how many assert a behaviour pyexecutorch deliberately does
   otherwise (both listed, with the reason, in scripts/conformance_exclusions.toml).

The official side depends only on the wheel, so its outcomes are cached, keyed by
the executorch version and each file's content.

``models/resnet.py`` imports torchvision for ``torchvision.models.resnet18()``. Where
the venv cannot import torchvision (the registry's wheel is built for another torch:
its compiled operators fail to load), both sides' processes get
``scripts/conformance_torchvision/`` on their path: a torch-only stand-in of ours with
that one model in torchvision's layout and initialization, the same on both sides, so
that the file is collected and counted. The test file itself is only import-rewritten;
its cached official outcomes are keyed by the stand-in's sources too.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
import tomllib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRATCH = REPO / ".cache" / "conformance"
EXCLUSIONS = REPO / "scripts" / "conformance_exclusions.toml"
# Our torch-only torchvision (ResNet-18 only), put on both sides' path when the real one
# cannot be imported: the registry's wheel is built for another torch and fails to load
# its operators, which left models/resnet.py uncollectable on both sides.
TORCHVISION_STANDIN = REPO / "scripts" / "conformance_torchvision"

# Folders of the wheel whose test-support files are copied (the APIs pyexecutorch ports).
SCOPES = (
    "exir",
    "devtools",
    "extension/pybindings",
    "extension/pytree",
    "backends/xnnpack",
    "backends/test",
)

# The suites of issue 31, relative to the wheel's package folder; a folder stands for
# its test files.
SUITES = (
    "extension/pybindings/test",
    "exir/program/test",
    "exir/tests/test_memory_planning.py",
    "exir/tests/test_passes.py",
    "exir/backend/test/test_backends_lifted.py",
    "exir/backend/test/test_partitioner.py",
    "devtools/bundled_program/test",
    "devtools/etdump/tests",
    "devtools/inspector/tests",
    "backends/xnnpack/test/ops/test_add.py",
    "backends/xnnpack/test/ops/test_conv2d.py",
    "backends/xnnpack/test/ops/test_linear.py",
    "backends/xnnpack/test/models/resnet.py",
)

# Import lines only: "from executorch..." / "import executorch..." at a statement start.
_IMPORT = re.compile(r"^(\s*)(from|import)(\s+)executorch(?=[.\s]|$)", re.MULTILINE)
# "import executorch[.a.b]" with no alias binds the name ``executorch``, which the code
# then uses (``executorch.backends.x``): the port binds that name to our package.
_BARE = re.compile(r"^([ \t]*)import[ \t]+executorch((?:\.\w+)*)[ \t]*$", re.MULTILINE)


def _bare(match: re.Match) -> str:
    indent, submodule = match.group(1), match.group(2)
    bind = "import pyexecutorch as executorch"
    return f"{indent}import pyexecutorch{submodule}; {bind}" if submodule else f"{indent}{bind}"


def wheel_root() -> Path:
    spec = importlib.util.find_spec("executorch")  # locates without importing
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("the official executorch package is not installed in this venv")
    return Path(next(iter(spec.submodule_search_locations)))


def is_test_path(rel: Path) -> bool:
    return any(part.startswith("test") for part in rel.parts)


def rewrite_imports(source: str) -> str:
    return _IMPORT.sub(r"\1\2\3pyexecutorch", _BARE.sub(_bare, source))


def suite_files(wheel: Path, only: list[str] | None = None) -> list[str]:
    files: list[str] = []
    for entry in only or SUITES:
        path = wheel / entry
        if path.is_dir():
            for f in sorted(path.glob("*.py")):
                if f.name.startswith("test_") or f.name.endswith("_test.py"):
                    files.append(str(f.relative_to(wheel)))
        elif path.is_file():
            files.append(entry)
        else:
            raise SystemExit(f"{entry}: not in the wheel at {wheel}")
    return files


def populate(wheel: Path, side: str, root: Path | None = None) -> Path:
    """Copy (and for ``ours``, rewrite) the wheel's test files into a scratch tree
    (``root``, by default ``.cache/conformance/<side>``).

    In place: only files whose text changed are rewritten and files the wheel no longer
    has are removed, so a run started while another runs in the same tree never finds
    a test file or a helper missing."""
    root = root or SCRATCH / side
    wanted: dict[Path, str] = {}
    for scope in SCOPES:
        for src in (wheel / scope).rglob("*.py"):
            rel = src.relative_to(wheel)
            if is_test_path(rel):
                text = src.read_text()
                wanted[root / rel] = rewrite_imports(text) if side == "ours" else text
    # Our own pytest configuration only: the repository's must not apply here.
    wanted[root / "pytest.ini"] = "[pytest]\n"
    for dst, text in wanted.items():
        if not dst.is_file() or dst.read_text() != text:
            dst.parent.mkdir(parents=True, exist_ok=True)
            dst.write_text(text)
    if root.is_dir():
        for stale in [*root.rglob("*.py"), *root.glob("pytest.ini")]:
            if stale not in wanted and "__pycache__" not in stale.parts:
                stale.unlink()
    return root


@dataclass
class FileResult:
    outcomes: dict[str, str] = field(default_factory=dict)  # test id -> outcome
    seconds: float = 0.0
    note: str = ""

    def count(self, outcome: str) -> int:
        return sum(1 for o in self.outcomes.values() if o == outcome)


def run_file(
    root: Path, rel: str, side: str, timeout: float, ours_path: str | None = None
) -> FileResult:
    return run_files(root, [rel], side, timeout, ours_path)[rel]


def run_files(
    root: Path, rels: list[str], side: str, timeout: float, ours_path: str | None = None
) -> dict[str, FileResult]:
    """Run ``rels`` in one pytest process (one file per process is the default; a
    slice shares the import cost); outcomes are split by file."""
    xml = root / (rels[0].replace("/", "__") + f"+{len(rels)}.xml")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    standin = torchvision_standin()
    if standin is not None:  # both sides: the same model on each
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(standin), env.get("PYTHONPATH", "")) if p
        )
    # -v: one line per finished test, read back when the file runs out of time.
    cmd = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider"]
    cmd += ["--import-mode=importlib", f"--junitxml={xml}", "-o", "junit_family=xunit1"]
    if side == "ours":
        env["CONFORMANCE_OVERLAY"] = str(root)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (ours_path, str(REPO / "scripts"), env.get("PYTHONPATH", "")) if p
        )
        cmd += ["-p", "conformance_overlay"]
    cmd += rels
    # an earlier run's report would otherwise stand for a run that times out
    xml.unlink(missing_ok=True)
    start = time.perf_counter()
    partial: dict[str, str] = {}
    try:
        proc = subprocess.run(
            cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout
        )
        note = "" if proc.returncode in (0, 1) else f"pytest exit {proc.returncode}"
    except subprocess.TimeoutExpired as e:
        # The tests that finished before the limit keep their outcomes.
        partial = parse_verbose(e.stdout.decode(errors="replace") if e.stdout else "", rels)
        note = f"timed out after {timeout:.0f} s, {len(partial)} tests finished"
    seconds = time.perf_counter() - start
    outcomes = parse_junit(xml, rels) if xml.is_file() else partial
    if not outcomes and not note:
        note = "no report"
    return {
        rel: FileResult(
            {t: o for t, o in outcomes.items() if t.split("::")[0] == rel}, seconds, note
        )
        for rel in rels
    }


# pytest -v: "<file>::<Class>::<test> PASSED  [ 5%]"
_VERBOSE = re.compile(r"^(\S+?::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b", re.MULTILINE)
_VERBOSE_OUTCOME = {
    "PASSED": "passed",
    "XPASS": "passed",
    "FAILED": "failed",
    "ERROR": "error",
    "SKIPPED": "skipped",
    "XFAIL": "skipped",
}


def parse_verbose(text: str, rels: list[str]) -> dict[str, str]:
    """Test id -> outcome, from ``pytest -v`` output (the tests that finished)."""
    return {
        test: _VERBOSE_OUTCOME[word]
        for test, word in _VERBOSE.findall(text)
        if test.split("::")[0] in rels
    }


def parse_junit(xml: Path, rels: list[str]) -> dict[str, str]:
    """Test id (``file::Class::test``) -> passed/failed/error/skipped."""
    outcomes: dict[str, str] = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        cls = case.get("classname", "")
        # classname is the dotted module path (+ class); keep only the class part
        parts = cls.split(".")
        klass = parts[-1] if parts and parts[-1][:1].isupper() else ""
        name = case.get("name", "")
        path = case.get("file") or ""
        rel = next((r for r in rels if path == r or path.endswith("/" + r)), None)
        if rel is None:  # a collection error names no file: it is its module's
            module = cls.replace(".", "/")
            rel = next((r for r in rels if r[:-3] in module or module in r), rels[0])
        test_id = f"{rel}::{klass}::{name}" if klass else f"{rel}::{name}"
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                break
        outcomes[test_id] = outcome
    return outcomes


@functools.cache
def torchvision_standin() -> Path | None:
    """The stand-in's folder when this interpreter cannot import torchvision, else None
    (asked of a child process: a failed import can leave a half-loaded package)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torchvision.models"], capture_output=True, text=True
    )
    return TORCHVISION_STANDIN if probe.returncode else None


def _standin_digest(wheel: Path, rel: str) -> str:
    """A digest of the stand-in's sources for a file that imports torchvision while the
    stand-in is in use (its official outcomes depend on it), else ''."""
    standin = torchvision_standin()
    if standin is None or "torchvision" not in (wheel / rel).read_text():
        return ""
    h = hashlib.sha256()
    for src in sorted(standin.rglob("*.py")):
        h.update(src.relative_to(standin).as_posix().encode() + b"\0" + src.read_bytes())
    return f"+torchvision-standin:{h.hexdigest()[:16]}"


def official_cache_key(wheel: Path, rel: str) -> str:
    digest = hashlib.sha256((wheel / rel).read_bytes()).hexdigest()[:16]
    version = importlib.metadata.version("executorch")
    return f"{version}:{rel}:{digest}{_standin_digest(wheel, rel)}"


def run_official(
    wheel: Path, files: list[str], timeout: float, cached_only: bool = False
) -> dict[str, FileResult]:
    cache_path = SCRATCH / "official_results.json"
    cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    results: dict[str, FileResult] = {}
    root: Path | None = None
    for rel in files:
        key = official_cache_key(wheel, rel)
        if key in cache:
            results[rel] = FileResult(**cache[key])
            continue
        if cached_only:
            results[rel] = FileResult(note="official not run (--official-cached-only)")
            continue
        root = root or populate(wheel, "official")
        print(f"[official] {rel} ...", file=sys.stderr, flush=True)
        results[rel] = run_file(root, rel, "official", timeout)
        # A run cut short is kept with its note (the tests that finished): the longest
        # official files run for most of an hour.
        if results[rel].outcomes:
            cache[key] = results[rel].__dict__
            cache_path.write_text(json.dumps(cache, indent=1, sort_keys=True))
    return results


def run_ours(
    wheel: Path, files: list[str], timeout: float, ours_path: str | None = None
) -> dict[str, FileResult]:
    root = populate(wheel, "ours")
    results: dict[str, FileResult] = {}
    for rel in files:
        print(f"[ours] {rel} ...", file=sys.stderr, flush=True)
        results[rel] = run_file(root, rel, "ours", timeout, ours_path)
    return results


def load_exclusions() -> dict[str, str]:
    """test id -> the official private member it reads."""
    data = tomllib.loads(EXCLUSIONS.read_text())
    return {entry["test"]: entry["member"] for entry in data.get("private", [])}


def load_deliberate() -> dict[str, str]:
    """test id -> why pyexecutorch deliberately behaves otherwise than the test asserts."""
    data = tomllib.loads(EXCLUSIONS.read_text())
    return {entry["test"]: entry["why"] for entry in data.get("deliberate", [])}


def table(files: list[str], official: dict[str, FileResult], ours: dict[str, FileResult]) -> str:
    excluded = load_exclusions()
    deliberate = load_deliberate()
    head = (
        f"{'file':58} {'official p/f/e':>15} {'ours p/f/e':>12} "
        f"{'both pass':>9} {'lost':>5} {'private':>7} {'deliberate':>10} {'ours s':>7}"
    )
    lines = [head, "-" * len(head)]
    totals = [0] * 10
    for rel in files:
        off, our = official[rel], ours[rel]
        off_pass = {t for t, o in off.outcomes.items() if o == "passed"}
        our_pass = {t for t, o in our.outcomes.items() if o == "passed"}
        lost = off_pass - our_pass
        private = {t for t in lost if t in excluded}
        chosen = {t for t in lost - private if t in deliberate}
        row = [
            off.count("passed"),
            off.count("failed"),
            off.count("error"),
            our.count("passed"),
            our.count("failed"),
            our.count("error"),
            len(off_pass & our_pass),
            len(lost) - len(private) - len(chosen),
            len(private),
            len(chosen),
        ]
        totals = [a + b for a, b in zip(totals, row, strict=True)]
        note = "; ".join(n for n in (off.note, our.note) if n)
        note = f"  ({note})" if note else ""
        lines.append(
            f"{rel:58} {row[0]:>5}/{row[1]}/{row[2]:<5} {row[3]:>4}/{row[4]}/{row[5]:<4}"
            f" {row[6]:>9} {row[7]:>5} {row[8]:>7} {row[9]:>10} {our.seconds:>7.1f}{note}"
        )
    lines.append("-" * len(head))
    t = totals
    lines.append(
        f"{'total':58} {t[0]:>5}/{t[1]}/{t[2]:<5} {t[3]:>4}/{t[4]}/{t[5]:<4}"
        f" {t[6]:>9} {t[7]:>5} {t[8]:>7} {t[9]:>10}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", nargs="*", help="suite files or folders (wheel-relative)")
    parser.add_argument("--timeout", type=float, default=1200.0, help="seconds per file")
    parser.add_argument("--json", type=Path, help="write per-test outcomes here")
    parser.add_argument(
        "--official-cached-only",
        action="store_true",
        help="use only cached official results (files without one show no official counts)",
    )
    parser.add_argument(
        "--ours-path", help="a src folder whose pyexecutorch to test instead (an older checkout)"
    )
    args = parser.parse_args(argv)
    wheel = wheel_root()
    files = suite_files(wheel, args.files)
    official = run_official(wheel, files, args.timeout, args.official_cached_only)
    # With cached official results only, a file without one has nothing to compare to.
    compared = [f for f in files if official[f].outcomes or not args.official_cached_only]
    ours = run_ours(wheel, compared, args.timeout, args.ours_path)
    for rel in set(files) - set(compared):
        ours[rel] = FileResult(note="not run: no official result to compare with")
    print(table(files, official, ours))
    if args.json:
        payload = {
            rel: {"official": official[rel].outcomes, "ours": ours[rel].outcomes} for rel in files
        }
        args.json.write_text(json.dumps(payload, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
