"""scripts/pack-reference-cuda.sh and scripts/gpu-reference.sh up to where a GPU is needed,
on a stand-in for the reference's cuda program: a small ELF program that names its plugin
folder the way PluginManager does (LIB_DIR "/plugins.txt"), one plugin with a .nv_fatbin
section, and a library the program links from another folder."""

import os
import pathlib
import subprocess

import pytest
from conftest import ROOT


def sh(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def fake_reference(base: pathlib.Path, big_bytes: int = 0) -> pathlib.Path:
    """A checkout-like folder with `cuda`; its plugins in base/lib/cuda (the compiled-in
    LIB_DIR)."""
    ref, libdir, dep = base / "ref", base / "lib" / "cuda", base / "dep"
    for d in (ref, libdir, dep):
        d.mkdir(parents=True)
    (dep / "dep.c").write_text("int dep(void) { return 1; }\n")
    (libdir / "plugin.c").write_text(
        '__attribute__((section(".nv_fatbin"))) const char fatbin[16] = {1};\n'
        "int plugin(void) { return fatbin[0]; }\n"
    )
    (ref / "main.c").write_text(
        f'#include <stdio.h>\nint dep(void);\nstatic const char *lib = "{libdir}/plugins.txt";\n'
        f"static char big[{big_bytes} + 1] = {{1}};\n"
        "int main(void) { puts(lib); return dep() + big[0]; }\n"
    )
    for cmd in (
        ["gcc", "-shared", "-fPIC", "-o", dep / "libfakedep.so", dep / "dep.c"],
        ["gcc", "-shared", "-fPIC", "-o", libdir / "pluginFake.so", libdir / "plugin.c"],
        ["gcc", "-o", ref / "cuda", ref / "main.c", f"-L{dep}", "-lfakedep", f"-Wl,-rpath,{dep}"],
    ):
        r = sh([str(c) for c in cmd])
        assert r.returncode == 0, r.stderr
    (libdir / "plugins.txt").write_text("Fake pluginFake.so\n")
    return ref


@pytest.fixture(scope="module")
def dataset(quiver_bin, tmp_path_factory):
    """12 events at <PU> 10: small, so the pack is quick."""
    ds = tmp_path_factory.mktemp("pack") / "dataset"
    r = sh(
        [
            quiver_bin,
            "generate",
            "--events",
            "12",
            "--pileup",
            "10",
            "--seed",
            "5",
            "--output",
            str(ds),
        ]
    )
    assert r.returncode == 0, r.stderr
    return ds


def pack(quiver_bin, ref, dataset, out):
    return sh(
        [
            str(ROOT / "scripts/pack-reference-cuda.sh"),
            "--reference-cuda",
            str(ref),
            "--input",
            str(dataset),
            "--quiver",
            quiver_bin,
            "--output",
            str(out),
        ]
    )


def no_gpu_env(tmp_path):
    """PATH with an nvidia-smi that finds no GPU first, whatever this machine has."""
    bin_ = tmp_path / "nogpu"
    bin_.mkdir(exist_ok=True)
    (bin_ / "nvidia-smi").write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed' >&2\nexit 9\n")
    (bin_ / "nvidia-smi").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_}:{os.environ['PATH']}"}


def test_the_pack_carries_everything_the_device_run_needs_and_stops_where_the_gpu_is(
    quiver_bin, dataset, tmp_path
):
    ref = fake_reference(tmp_path)
    out = tmp_path / "devbin"
    r = pack(quiver_bin, ref, dataset, out)
    assert r.returncode == 0, r.stderr
    p = out / "ref-cuda"
    # The plugin folder the program loads from, with its plugins.txt, and the linked library.
    assert (p / "lib/cuda/plugins.txt").read_text() == "Fake pluginFake.so\n"
    assert (p / "lib/cuda/pluginFake.so").is_file()
    assert (p / "lib/libfakedep.so").is_file()
    info = dict(line.split(" ", 1) for line in (p / "INFO").read_text().splitlines())
    assert info == {"events": "12", "libdir": str(tmp_path / "lib" / "cuda")}
    # Quiver's own dataset (raw data and conditions, no truth) and the same events exported.
    assert (p / "dataset/raw.arrow").is_file() and not (p / "dataset/simhits.parquet").exists()
    for name in (
        "raw.bin",
        "fedIds.bin",
        "cablingMap.bin",
        "gain.bin",
        "cpefast.bin",
        "beamspot.bin",
    ):
        assert (p / "data" / name).stat().st_size > 0, name
    # One count record per event: the reference reads one for each event of raw.bin.
    assert (p / "data/digicluster.bin").stat().st_size == 12 * 12
    assert (p / "data/tracks.bin").stat().st_size == 12 * 4
    assert (p / "data/vertices.bin").stat().st_size == 12 * 4
    listed = {line.split(maxsplit=1)[1] for line in (p / "MANIFEST").read_text().splitlines()}
    assert {"quiver", "ref-cuda/cuda", "ref-cuda/INFO", "ref-cuda/data/raw.bin"} <= listed
    assert "packed 12 events" in r.stdout

    env = {**no_gpu_env(tmp_path), "REF_CUDA_PACK": str(out)}
    r = sh([str(ROOT / "scripts/gpu-reference.sh")], env=env)
    assert r.returncode != 0
    assert "no NVIDIA GPU here" in r.stderr and "the pack is whole" in r.stderr, r.stderr

    # A file changed after packing is caught before anything runs.
    with open(p / "data/tracks.bin", "ab") as f:
        f.write(b"\0")
    r = sh([str(ROOT / "scripts/gpu-reference.sh")], env=env)
    assert r.returncode != 0 and "does not match its MANIFEST" in r.stderr, r.stderr


def test_a_pack_over_the_carry_limit_is_refused_and_the_last_pack_kept(
    quiver_bin, dataset, tmp_path
):
    out = tmp_path / "devbin"
    r = pack(quiver_bin, fake_reference(tmp_path / "small"), dataset, out)
    assert r.returncode == 0, r.stderr
    manifest = (out / "ref-cuda/MANIFEST").read_text()
    r = pack(quiver_bin, fake_reference(tmp_path / "big", big_bytes=64 << 20), dataset, out)
    assert r.returncode != 0
    assert "over the device tool's 64 MiB" in r.stderr, r.stderr
    assert (out / "ref-cuda/MANIFEST").read_text() == manifest
    assert sorted(x.name for x in out.iterdir()) == ["quiver", "ref-cuda"]


@pytest.mark.parametrize(
    "breakage, message",
    [
        ("no_plugins_txt", "has no plugins.txt"),
        ("no_device_code", "holds device code (.nv_fatbin)"),
        ("missing_library", "needs libfakedep.so, which the loader cannot find here"),
    ],
)
def test_a_broken_reference_build_is_named(quiver_bin, dataset, tmp_path, breakage, message):
    ref = fake_reference(tmp_path)
    libdir = tmp_path / "lib" / "cuda"
    if breakage == "no_plugins_txt":
        (libdir / "plugins.txt").unlink()
    elif breakage == "no_device_code":
        r = sh(["objcopy", "--remove-section", ".nv_fatbin", str(libdir / "pluginFake.so")])
        assert r.returncode == 0, r.stderr
    else:
        (tmp_path / "dep" / "libfakedep.so").unlink()
    r = pack(quiver_bin, ref, dataset, tmp_path / "devbin")
    assert r.returncode != 0
    assert message in r.stderr, r.stderr
    assert not (tmp_path / "devbin" / "ref-cuda").exists()
