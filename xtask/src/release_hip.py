"""Compile 7.x's HIP batch-norm kernels as MIOpen compiles them at run time,
through hipRTC, from the texts release_kernels.py wrote out of a libMIOpen:
pristine and fixed, for gfx1010/1011/1012 and a gfx1030 control, in the
cases torch reaches: fp32, and mixed as the kernel's solver spells it
(never pure fp16), as src/verdict/cases.rs does. Run by `cargo xtask fidelity --release` in the experimental
chroot (libhiprtc 7, or 6 in unstable):

    release_hip.py PRISTINE FIXED

PRISTINE and FIXED hold src/kernels/; every HIP batch-norm kernel is
compiled. Sizes and flags are the OpenCL
harness's (bn-kernels.sh) for variant 1, which the HIP training kernel
implements; the MIO_BN_GFX*X names are set as the solvers set them, from the
device name. Prints one tab-separated row per compile: kernel, variant,
precision, arch, tree, return code, first error.
"""
import ctypes
import re
import sys
from pathlib import Path

# The suite's hipRTC: 7 in experimental, 6 in unstable.
for name in ("libhiprtc.so.7", "libhiprtc.so.6"):
    try:
        rtc = ctypes.CDLL(name)
        break
    except OSError:
        continue
else:
    raise SystemExit("no libhiprtc.so.7 or .6 in this chroot")
ARCHES = ["gfx1010", "gfx1011", "gfx1012", "gfx1030"]
FAMILIES = ["MIO_BN_GFX103X", "MIO_BN_GFX110X", "MIO_BN_GFX115X", "MIO_BN_GFX120X"]
PRECISIONS = {
    "fp32": {"MIOPEN_USE_FP16": 0, "MIOPEN_USE_FP32": 1, "MIOPEN_USE_FPMIX": 0},
    "mixed": {"MIOPEN_USE_FP16": 0, "MIOPEN_USE_FP32": 0, "MIOPEN_USE_FPMIX": 1},
}
# The HIP fusion kernel (BatchNormActiv...): its solver passes
# MIOPEN_USE_FP16=1 alone for half data, and reads one element at a time.
FUSION_MIXED = {"MIOPEN_USE_FP16": 1, "MIOPEN_USE_FP32": 0, "MIOPEN_USE_FPMIX": 0}


def precision(kernel, prec):
    fusion = "Activ" in kernel
    defs = dict(FUSION_MIXED if fusion and prec == "mixed" else PRECISIONS[prec])
    defs["MIOPEN_READ_TYPE"] = "FP_TYPE" if fusion else "FP_TYPE4"
    defs["MIOPEN_PREC_READ_TYPE"] = "FP_TYPE_PREC" if fusion else "FP_TYPE_PREC4"
    return defs
HW, GRP = 4096, 1024
COMMON = {
    "MIO_SAVE_MEAN_VARIANCE": 1, "MIO_RUNNING_RESULT": 1, "MIO_BN_N": 32, "MIO_BN_C": 64,
    "MIO_BN_HW": HW, "MIO_BN_NHW": 32 * HW, "MIO_BN_CHW": 64 * HW, "MIO_BN_NCHW": 32 * 64 * HW,
    "MIO_BN_GRP0": GRP, "MIO_BN_GRP1": 1, "MIO_BN_GRP2": 1, "MIO_BN_LDS_SIZE": GRP,
    "MIO_BN_LDSGCN_SIZE": GRP // 64, "MIO_BN_NGRPS": 4, "MIO_LAYOUT_NHWC": 0,
    "MIO_BN_VARIANT": 1,
}


def compile_one(tree, kernel, arch, prec):
    kernels = tree / "src" / "kernels"
    headers = sorted(p for p in kernels.iterdir() if p.name != kernel)
    defs = dict(COMMON, **precision(kernel, prec))
    for f in FAMILIES:
        defs[f] = int(arch.startswith("gfx" + f[len("MIO_BN_GFX"):-1]))
    opts = [f"--offload-arch={arch}", "-O3", "-std=c++17"] + [f"-D{k}={v}" for k, v in defs.items()]
    prog = ctypes.c_void_p()
    n = len(headers)
    texts = (ctypes.c_char_p * n)(*[h.read_bytes() for h in headers])
    names = (ctypes.c_char_p * n)(*[h.name.encode() for h in headers])
    rc = rtc.hiprtcCreateProgram(ctypes.byref(prog), (kernels / kernel).read_bytes(), kernel.encode(), n, texts, names)
    if rc != 0:
        return rc, f"hiprtcCreateProgram returned {rc}"
    argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
    rc = rtc.hiprtcCompileProgram(prog, len(opts), argv)
    size = ctypes.c_size_t()
    rtc.hiprtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value + 1)
    rtc.hiprtcGetProgramLog(prog, log)
    rtc.hiprtcDestroyProgram(ctypes.byref(prog))
    errors = [re.sub(r"^.*?error: ", "", l) for l in log.value.decode(errors="replace").splitlines() if "error:" in l]
    return rc, (errors[0] if errors else "").replace("\t", " ")


def main():
    trees = {"pristine": Path(sys.argv[1]), "patched": Path(sys.argv[2])}
    # Every HIP batch-norm kernel: those configuration.hpp's switch decides
    # (7.x) and those it does not (6.4's ActivInfer).
    kernels = sorted(
        p.name for p in (trees["patched"] / "src" / "kernels").glob("MIOpenBatchNorm*HIP.cpp")
    )
    if not kernels:
        raise SystemExit("no HIP batch-norm kernel in " + str(trees["patched"]))
    for kernel in kernels:
        for arch in ARCHES:
            for prec in PRECISIONS:
                for tree, path in trees.items():
                    rc, first = compile_one(path, kernel, arch, prec)
                    print("\t".join([kernel, "1", prec, arch, tree, str(rc), first]), flush=True)


main()
