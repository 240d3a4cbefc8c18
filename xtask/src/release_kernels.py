"""Extract MIOpen's batch-norm OpenCL kernels, as a release ships them, from
its libMIOpen.so: MIOpen embeds every kernel and kernel header as a string
(symbols MIOPEN_KERNEL_<NAME>, headers MIOPEN_KERNEL_<STEM>_INCLUDE) and
compiles them at run time. Run by `cargo xtask fidelity --release`:

    release_kernels.py LIB OUT

writes OUT/src/kernels/<Name>.cl for each OpenCL batch-norm kernel (named
by its first __kernel function's file as MIOpen names it), <Name>HIP.cpp for
each HIP one (7.x), and every header they include, under its #include name.
Prints one line per file.
"""
import re
import struct
import subprocess
import sys
from pathlib import Path

lib, out = Path(sys.argv[1]), Path(sys.argv[2])
data = lib.read_bytes()

# Virtual address -> file offset, from the PT_LOAD program headers.
phoff, = struct.unpack_from("<Q", data, 0x20)
phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
loads = []
for i in range(phnum):
    p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", data, phoff + i * phentsize)
    if p_type == 1:
        loads.append((p_vaddr, p_offset, p_filesz))


def at(vaddr, size):
    for base, off, filesz in loads:
        if base <= vaddr < base + filesz:
            return data[off + vaddr - base: off + vaddr - base + size]
    raise SystemExit(f"address {vaddr:#x} is in no loaded segment")


texts = {}
nm = subprocess.run(["nm", "-D", "-S", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
for line in nm.stdout.splitlines():
    parts = line.split()
    if len(parts) == 4 and parts[3].startswith("MIOPEN_KERNEL_") and not parts[3].endswith("_SIZE"):
        raw = at(int(parts[0], 16), int(parts[1], 16))
        texts[parts[3][len("MIOPEN_KERNEL_"):]] = raw.split(b"\0", 1)[0].decode()

# MIOpen's own file names for the kernels whose symbol is all capitals.
names = {
    "MIOPENBATCHNORM" + rest.upper(): f"MIOpenBatchNorm{rest}.cl"
    for rest in [
        "ActivBwdPerAct", "ActivBwdSpatial", "ActivFwdTrainPerAct", "ActivFwdTrainSpatial",
        "ActivInfer", "BwdPerAct", "BwdSpatial", "FwdInferPerAct", "FwdInferSpatial",
        "FwdTrainPerAct", "FwdTrainSpatial",
    ]
}
names.update({
    "MIOPENBATCHNORM" + rest.upper() + "HIP": f"MIOpenBatchNorm{rest}HIP.cpp"
    for rest in ["FwdTrainSpatial", "ActivInfer", "FwdInfer", "BwdSpatial"]
})
dest = out / "src" / "kernels"
dest.mkdir(parents=True, exist_ok=True)
todo = [(sym, name) for sym, name in names.items() if sym in texts and ("__kernel" in texts[sym] or "__global__" in texts[sym])]
written = set()
while todo:
    sym, name = todo.pop()
    if name in written:
        continue
    (dest / name).write_text(texts[sym])
    written.add(name)
    print(name)
    for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', texts[sym], re.M):
        stem = re.sub(r"[^A-Za-z0-9]", "_", Path(inc).stem).upper()
        key = stem + "_INCLUDE"
        if key not in texts:
            raise SystemExit(f"{name} includes {inc}, and the library has no MIOPEN_KERNEL_{key}")
        todo.append((key, inc))
