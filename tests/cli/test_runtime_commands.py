"""``run``, ``inspect``, ``bench``, ``profile`` and the top level, on real files."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

from pyexecutorch.cli.main import COMMANDS
from tests import models, official

from .conftest import run_blocked_torch

# --------------------------------------------------------------------------------------
# Top level and help


def test_no_command_prints_help(cli):
    r = cli()
    assert r.rc == 2
    assert "usage: pyexecutorch" in r.out
    assert "examples:" in r.out


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_examples(cli, command):
    r = cli(command, "--help")
    assert r.rc == 0
    assert r.out.startswith(f"usage: pyexecutorch {command}")
    assert "examples:" in r.out
    assert f"pyexecutorch {command}" in r.out.split("examples:")[1]


def test_unknown_command(cli):
    r = cli("frobnicate")
    assert r.rc == 2
    assert r.out == ""
    assert r.err.startswith("pyexecutorch: error: argument COMMAND: invalid choice: 'frobnicate'")
    assert r.err.count("\n") == 1


def test_missing_argument_is_one_line(cli):
    r = cli("run")
    assert r.rc == 2
    assert r.err == (
        "pyexecutorch run: error: the following arguments are required: model "
        "(see 'pyexecutorch run --help')\n"
    )


def test_python_dash_m_and_version():
    r = subprocess.run(
        [sys.executable, "-m", "pyexecutorch", "--version"], capture_output=True, text=True
    )
    assert r.returncode == 0
    assert re.fullmatch(r"pyexecutorch \d+\.\d+\.\d+\n", r.stdout)


def test_debug_shows_the_traceback(tmp_path):
    missing = tmp_path / "missing.pte"
    plain = subprocess.run(
        [sys.executable, "-m", "pyexecutorch", "run", str(missing)], capture_output=True, text=True
    )
    assert plain.returncode == 1
    assert "Traceback" not in plain.stderr
    debug = subprocess.run(
        [sys.executable, "-m", "pyexecutorch", "run", str(missing), "--debug"],
        capture_output=True,
        text=True,
    )
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
    assert f"CLIError: program file not found: {missing}" in debug.stderr


# --------------------------------------------------------------------------------------
# run


def test_run_random_inputs(cli, ptes):
    r = cli("run", ptes["mlp"])
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert lines[0] == "method 'forward': 1 input(s), random (seed 0)"
    assert lines[1].startswith("  input 0: float32[4, 16]  min ")
    assert re.match(r"1 output\(s\) in .+ \(load .+\):", lines[2])
    assert lines[3].startswith("  output 0: float32[4, 8]  min ")


def test_run_npy_inputs_matches_eager(cli, ptes, tmp_path):
    case = models.get_case("mlp")
    (x,) = case.inputs()
    np.save(tmp_path / "x.npy", x.numpy())
    r = cli("run", ptes["mlp"], "--inputs", tmp_path / "x.npy", "--output", tmp_path / "out.npz")
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0] == f"method 'forward': 1 input(s), from {tmp_path / 'x.npy'}"
    assert r.out.splitlines()[-1] == f"saved 1 output(s) to {tmp_path / 'out.npz'}"
    with np.load(tmp_path / "out.npz") as got:
        assert got.files == ["output_0"]
        official.assert_close(case, [got["output_0"]], official.eager_outputs(case, (x,)))


def test_run_npz_inputs_with_scalars(cli, ptes, tmp_path):
    case = models.get_case("scalar_input")
    inputs = case.inputs()
    arrays = {
        f"a{i}": (v.numpy() if hasattr(v, "numpy") else np.asarray(v)) for i, v in enumerate(inputs)
    }
    np.savez(tmp_path / "in.npz", **arrays)
    r = cli(
        "run", ptes["scalar_input"], "--inputs", tmp_path / "in.npz", "--output", tmp_path / "o.npz"
    )
    assert r.rc == 0, r.err
    with np.load(tmp_path / "o.npz") as got:
        official.assert_close(
            case, [got[k] for k in got.files], official.eager_outputs(case, inputs)
        )


def test_run_scalar_inputs_random(cli, ptes):
    r = cli("run", ptes["scalar_input"])
    assert r.rc == 0, r.err
    assert "  input 1: float 2.5" in r.out.splitlines()
    assert "  input 2: int 3" in r.out.splitlines()


def test_run_other_method(cli, ptes):
    r = cli("run", ptes["multi_method"], "--method", "decode")
    assert r.rc == 0, r.err
    assert r.out.splitlines()[0] == "method 'decode': 1 input(s), random (seed 0)"
    assert "  output 0: float32[3, 8]" in r.out


def test_run_stateful_program(cli, ptes):
    r = cli("run", ptes["kv_cache"])
    assert r.rc == 0, r.err
    assert "  input 1: int64[1]" in r.out


@pytest.mark.parametrize("command", ["run", "bench", "inspect"])
def test_missing_file(cli, tmp_path, command):
    path = tmp_path / "missing.pte"
    r = cli(command, path)
    assert r.rc == 1
    assert r.out == ""
    assert r.err == f"pyexecutorch {command}: error: program file not found: {path}\n"


@pytest.mark.parametrize("command", ["run", "bench", "inspect"])
def test_corrupt_file(cli, tmp_path, command):
    path = tmp_path / "bad.pte"
    path.write_bytes(b"garbage garbage garbage garbage")
    r = cli(command, path)
    assert r.rc == 1
    assert r.err == (
        f"pyexecutorch {command}: error: {path} is not a valid program: not an ExecuTorch program: "
        "file identifier b'age ' at offset 4, expected b'ET12'\n"
    )


@pytest.mark.parametrize("command", ["run", "inspect"])
def test_truncated_and_empty_files(cli, ptes, tmp_path, command):
    cut = tmp_path / "cut.pte"
    data = ptes["mlp"].read_bytes()
    cut.write_bytes(data[:100])
    r = cli(command, cut)
    assert r.rc == 1
    assert r.err.startswith(
        f"pyexecutorch {command}: error: {cut} is not a valid program: extended header: program size "
    )
    assert r.err.endswith(" > file size 100\n")
    empty = tmp_path / "empty.pte"
    empty.write_bytes(b"")
    r = cli(command, empty)
    assert r.rc == 1
    assert (
        r.err
        == f"pyexecutorch {command}: error: {empty} is not a valid program: the file is empty\n"
    )


def test_directory_is_not_a_program(cli, tmp_path):
    r = cli("run", tmp_path)
    assert r.rc == 1
    assert r.err == f"pyexecutorch run: error: {tmp_path} is a directory, not a program file\n"


def test_run_unknown_method(cli, ptes):
    r = cli("run", ptes["multi_method"], "--method", "nope")
    assert r.rc == 1
    assert (
        r.err
        == f"pyexecutorch run: error: {ptes['multi_method']} has no method 'nope'; its methods: decode, forward, scale, use_cache, vocab_size\n"
    )


def test_run_wrong_number_of_inputs(cli, ptes, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((4, 16), np.float32))
    r = cli("run", ptes["mlp"], "--inputs", tmp_path / "a.npy", tmp_path / "a.npy")
    assert r.rc == 1
    assert r.err == "pyexecutorch run: error: method 'forward' takes 1 inputs, but 2 were given\n"


def test_run_wrong_input_shape(cli, ptes, tmp_path):
    np.save(tmp_path / "a.npy", np.zeros((4, 15), np.float32))
    r = cli("run", ptes["mlp"], "--inputs", tmp_path / "a.npy")
    assert r.rc == 1
    assert r.err == (
        "pyexecutorch run: error: Input 0 of method 'forward' has shape [4, 15], but the method expects [4, 16]\n"
    )


def test_run_missing_and_unreadable_input_files(cli, ptes, tmp_path):
    r = cli("run", ptes["mlp"], "--inputs", tmp_path / "nope.npy")
    assert (r.rc, r.err) == (
        1,
        f"pyexecutorch run: error: input file not found: {tmp_path / 'nope.npy'}\n",
    )
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not numpy")
    r = cli("run", ptes["mlp"], "--inputs", bad)
    assert r.rc == 1
    assert r.err.startswith(f"pyexecutorch run: error: cannot read {bad}: ")


def test_run_inputs_and_random_exclude_each_other(cli, ptes, tmp_path):
    r = cli("run", ptes["mlp"], "--random", "--inputs", tmp_path / "x.npy")
    assert r.rc == 2
    assert r.err == (
        "pyexecutorch run: error: argument --inputs: not allowed with argument --random "
        "(see 'pyexecutorch run --help')\n"
    )


def test_run_missing_data_file(cli, ptes, tmp_path):
    r = cli("run", ptes["mlp"], "--data", tmp_path / "w.ptd")
    assert (r.rc, r.err) == (
        1,
        f"pyexecutorch run: error: data file not found: {tmp_path / 'w.ptd'}\n",
    )


# --------------------------------------------------------------------------------------
# inspect


def test_inspect(cli, ptes):
    r = cli("inspect", ptes["multi_method"])
    assert r.rc == 0, r.err
    out = r.out
    assert out.startswith(f"{ptes['multi_method']}: ")
    assert "method 'forward'" in out and "method 'decode'" in out
    assert "arenas (non_const_buffer_sizes)" in out
    assert "constant buffers:" in out
    assert "operator histogram (all methods): " in out
    assert re.search(r"^  aten::addmm\.out +\d+  #+$", out, re.M)
    assert out.rstrip().endswith("verification: ok")
    assert "chain 0" not in out


def test_inspect_verbose_prints_the_plan(cli, ptes):
    r = cli("inspect", ptes["mlp"], "--verbose")
    assert r.rc == 0, r.err
    assert "values:" in r.out
    assert "chain 0" in r.out


def test_inspect_delegates(cli, ptes):
    if "mlp_xnnpack" not in ptes:
        pytest.skip("the official XNNPACK export is not available")
    r = cli("inspect", ptes["mlp_xnnpack"])
    assert r.rc == 0, r.err
    assert "XnnpackBackend" in r.out
    assert "delegate segments: 1" in r.out
    assert (
        "operator histogram (all methods): 0 kernel call(s) of 0 operator(s), 1 delegate call(s)"
        in r.out
    )


def test_inspect_reports_failed_verification(cli, ptes, tmp_path):
    from pyexecutorch.schema.pte import decode_pte, encode_pte

    pte = decode_pte(ptes["mlp"].read_bytes())
    pte.program.execution_plan[0].inputs = [9999]
    bad = tmp_path / "bad_index.pte"
    bad.write_bytes(encode_pte(pte))
    r = cli("inspect", bad)
    assert r.rc == 1
    assert "verification: FAILED: " in r.out
    r = cli("run", bad)
    assert r.rc == 1
    assert r.err.startswith(f"pyexecutorch run: error: {bad} is not a valid program: ")


# --------------------------------------------------------------------------------------
# bench and profile


def test_bench(cli, ptes):
    r = cli("bench", ptes["mlp"], "-n", "7", "--warmup", "2")
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].startswith(f"{ptes['mlp']} method 'forward', inputs random (seed 0); load ")
    assert re.fullmatch(
        r"latency over 7 runs \(2 warm-up\): min \S+ \S+  median \S+ \S+  p90 \S+ \S+", lines[1]
    )


def test_bench_method_and_bad_count(cli, ptes):
    r = cli("bench", ptes["multi_method"], "--method", "decode", "-n", "3")
    assert r.rc == 0, r.err
    assert "method 'decode'" in r.out
    r = cli("bench", ptes["mlp"], "-n", "0")
    assert (r.rc, r.err) == (2, "pyexecutorch bench: error: -n must be at least 1, got 0\n")


def test_latency_stats():
    from pyexecutorch.cli.bench import latency_stats

    s = latency_stats([5.0, 1.0, 3.0, 2.0, 4.0, 6.0, 7.0, 8.0, 9.0, 10.0])
    assert s == {"min": 1.0, "median": 5.5, "p90": 10.0, "runs": 10}


def test_profile(cli, ptes, tmp_path):
    from pyexecutorch.schema.etdump import decode_etdump

    png, etdp = tmp_path / "p.png", tmp_path / "p.etdp"
    r = cli(
        "profile", str(ptes["mlp_xnnpack"]), "-n", "3", "--plot", str(png), "--etdump", str(etdp)
    )
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert lines[0].startswith("method 'forward' of ") and "3 traced run(s)" in lines[0]
    assert lines[1].split() == [
        "operator",
        "calls",
        "total",
        "us",
        "mean",
        "us",
        "p50",
        "us",
        "p90",
        "us",
        "share",
    ]
    rows = {line.split()[0]: line.split() for line in lines[2:] if line.startswith("Xnnpack")}
    # Inside the delegate: one row per node type, and the call's own time.
    assert "XnnpackBackend:XNNFullyConnected" in rows and "XnnpackBackend" in rows
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = decode_etdump(etdp.read_bytes()).run_data
    assert [run.name for run in runs] == ["Default"] + ["Execute"] * 3  # the warm-up run is dropped


def test_profile_portable_top(cli, ptes):
    r = cli("profile", str(ptes["mlp"]), "-n", "2", "--top", "1")
    assert r.rc == 0, r.err
    lines = r.out.splitlines()
    assert len(lines) == 4 and lines[2].startswith("aten::")
    assert lines[3].startswith("... ") and "more operators" in lines[3]
    share = float(lines[2].split()[-1].rstrip("%"))
    assert 0 < share <= 100


def test_profile_bad_runs(cli, ptes):
    r = cli("profile", str(ptes["mlp"]), "-n", "0")
    assert (r.rc, r.err) == (
        1,
        "pyexecutorch profile: error: -n/--runs must be at least 1, got 0\n",
    )


# --------------------------------------------------------------------------------------
# No torch on the runtime side


@pytest.mark.parametrize(
    "args",
    [
        ("run", "{mlp}"),
        ("run", "{scalar_input}"),
        ("inspect", "{mlp}", "--verbose"),
        ("bench", "{mlp}", "-n", "3"),
        ("profile", "{mlp_xnnpack}", "-n", "2"),
        ("export", "--help"),
        ("demo", "--help"),
        ("--help",),
    ],
    ids=lambda a: " ".join(a),
)
def test_commands_run_with_torch_blocked(ptes, args):
    argv = [a.format(**{k: str(v) for k, v in ptes.items()}) for a in args]
    r = run_blocked_torch(*argv)
    assert r.returncode == 0, r.stderr
    assert r.stdout


def test_export_with_torch_blocked_is_one_clear_line(tmp_path):
    r = run_blocked_torch(
        "export", "pyexecutorch.examples.gpt:make_model", "-o", tmp_path / "x.pte"
    )
    assert r.returncode == 1
    assert (
        r.stderr
        == "pyexecutorch export: error: export needs torch; install it with: pip install 'pyexecutorch[export]'\n"
    )
