#!/bin/bash
# Run inside the experimental ROCm chroot by `cargo xtask fidelity
# --upstream DIR`: upstream's newest batch-norm kernel texts (DIR holds
# src/kernels/ and MANIFEST.tsv: path, commit, chars, sha256 a line), judged
# by the tool's own diagnosis, unpatched: embedded in a library as MIOpen's
# build embeds them (MIOPEN_KERNEL_<NAME>, headers _INCLUDE), in a torch
# whose lib/ has the suite's comgr and hipRTC beside it, then `install
# --into-torch --in-place --dry-run` for gfx1010, gfx1011 and gfx1012 (a
# KFD topology each), which compiles every kernel in every case it reads
# for that card (gfx1030 the control) and changes nothing.
set -u
F=/fid/upstream
R=$F/results
. /fid/bn-kernels.sh
results_dir
dpkg-query -W -f '${Package}\t${Version}\n' libamd-comgr3 libhiprtc7 libamdhip64-7 >"$R/toolchain.tsv" 2>/dev/null
rdna1-patch --version | head -1 >"$R/tool.txt"
n=$(grep -vc "^#" "$F/MANIFEST.tsv")
echo "rocm-libraries projects/miopen/src/kernels: $n texts read with the index's read_file (each file's commit in the list below)" >"$R/source.txt"
cp "$F/MANIFEST.tsv" "$R/manifest.tsv"

# 1. The library: the texts as MIOpen's build embeds them.
t=$(now)
python3 - "$F/src/kernels" "$F/kernels.c" <<'PY'
import re, sys
from pathlib import Path
src, out = Path(sys.argv[1]), Path(sys.argv[2])
lines = ["#include <stddef.h>"]
for p in sorted(src.iterdir()):
    name = re.sub(r"[^A-Za-z0-9]", "_", p.stem).upper()
    if p.suffix in (".h", ".hpp"):
        name += "_INCLUDE"
    var = "MIOPEN_KERNEL_" + name
    data = p.read_bytes()
    lines.append(f"const size_t {var}_SIZE = {len(data)};")
    lines.append(f"const char {var}[] = {{" + ",".join(str(b) for b in data) + ",0};")
out.write_text("\n".join(lines) + "\n")
PY
S=$F/site
T=$S/torch
rm -rf "$S" "$F/state" "$F/prefix"
mkdir -p "$T/lib"
cc -shared -fPIC -o "$T/lib/libMIOpen.so" "$F/kernels.c" -Wl,-soname,libMIOpen.so
step embed "$?" "$(since "$t")" "$(ls "$F/src/kernels" | wc -l) texts in libMIOpen.so ($(stat -c %s "$T/lib/libMIOpen.so") bytes)"
printf "__version__ = '2.10.0+rocm7.2.4'\ncuda = None\nhip = '7.2.4'\n" >"$T/version.py"
for l in $(ls /usr/lib/x86_64-linux-gnu/libamd_comgr.so.[0-9] /usr/lib/x86_64-linux-gnu/libhiprtc.so.[0-9] | sort); do
    ln -s "$l" "$T/lib/$(basename "$l")"
done

# 2. The diagnosis, as a user's dry run makes it, once for each RDNA1
# card: the KFD topology of an RX 5600 XT (tests/fixtures/sysfs) with its
# gfx_target_version set to the card's.
: >"$R/diagnosis.txt"
for v in 0 1 2; do
    sys=$F/sysfs-gfx101$v
    rm -rf "$sys" && cp -a "$F/sysfs" "$sys"
    sed -i "s/^gfx_target_version 100100\$/gfx_target_version 10010$v/" "$sys"/class/kfd/kfd/topology/nodes/*/properties
    rm -rf "$F/state" "$F/prefix"
    t=$(now)
    RDNA1_PATCH_SYSFS=$sys rdna1-patch install --into-torch --in-place --dry-run --profile rocm-7.2 \
        --torch-dir "$T" --state-dir "$F/state" --prefix "$F/prefix" >"$R/inplace-gfx101$v.log" 2>&1
    rc=$?
    grep -E '^ *(Kernel|Diagnosis|Proven|Nothing) ' "$R/inplace-gfx101$v.log" | sed 's/^ *//' >>"$R/diagnosis.txt"
    step "diagnosis gfx101$v" "$rc" "$(since "$t")" "$(grep -o 'Diagnosis [0-9]* of [0-9]* batch-norm kernels[^(]*fail for gfx101[0-9]' "$R/inplace-gfx101$v.log" | head -1)"
done
exit 0
