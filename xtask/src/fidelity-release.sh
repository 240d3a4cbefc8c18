#!/bin/bash
# Run inside the ROCm chroot by `cargo xtask fidelity --release VERSION`:
#   fidelity-release.sh VERSION
# MIOpen's batch-norm kernels as a release ships them: the texts Debian's
# libmiopen1 VERSION embeds (kernels are compiled at run time, with the
# headers inlined), pristine and with the shipped bn-gfx101x series' change
# made to them, compiled by the same harness as the source trees.
set -u
V=$1
F=/fid/release-$V
R=$F/results
. /fid/bn-kernels.sh
results_dir

dpkg-query -W -f '${Package}\t${Version}\n' clang-21 binutils >"$R/toolchain.tsv"
rdna1-patch --version | head -1 >"$R/tool.txt"

# 1. The package, from whichever suite carries this version.
rm -rf "$F/deb" "$F/x" "$F/pristine" "$F/patched"
mkdir -p "$F/deb"
t=$(now)
(cd "$F/deb" && apt-get -o Acquire::Check-Valid-Until=false download "libmiopen1=$V*" -t experimental >"$R/download.log" 2>&1 ||
    apt-get download "libmiopen1=$V*" >>"$R/download.log" 2>&1)
deb=$(ls "$F"/deb/libmiopen1_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { step download 1 "$(since "$t")" "apt-get download libmiopen1=$V"; exit 1; }
step download 0 "$(since "$t")" "$(basename "$deb") ($(stat -c %s "$deb") bytes)"
dpkg-deb -x "$deb" "$F/x"
lib=$(find "$F/x" -name 'libMIOpen.so.1*' -type f | head -1)
echo "Debian's $(basename "$deb"): $(basename "$lib"), $(stat -c %s "$lib") bytes; kernel texts from its MIOPEN_KERNEL_* symbols" >"$R/source.txt"

# 2. Its batch-norm kernel texts, pristine and patched.
t=$(now)
python3 /fid/release_kernels.py "$lib" "$F/pristine" >"$R/extract.log" 2>&1
rc=$?
step extract "$rc" "$(since "$t")" "$(wc -l <"$R/extract.log") OpenCL batch-norm kernels from $(basename "$lib")"
[ "$rc" = 0 ] || exit 1
cp -a "$F/pristine" "$F/patched"
t=$(now)
python3 /fid/apply_release.py /fid/bn-gfx101x/0004-batchnorm-gfx101x.patch "$F/patched/src/kernels" >"$R/apply.log" 2>&1
rc=$?
step apply "$rc" "$(since "$t")" "$(tr '\n' ' ' <"$R/apply.log")"
[ "$rc" = 0 ] || exit 1

# 3. The harness. A release has no solver sources: the MIO_BN_GFX*X names
# are those the kernel texts test (their #ifndef defaults), set per arch as
# the solvers set them; the series adds none.
flags_pristine=$(cat "$F"/pristine/src/kernels/*.cl | grep -o '^#ifndef MIO_BN_GFX[0-9]*X' | sed 's/#ifndef //' | sort -u | tr '\n' ' ')
flags_patched=$flags_pristine
echo "pristine and patched: $flags_pristine" >"$R/flags.txt"
PRISTINE=$F/pristine PATCHED=$F/patched
bn_kernels
exit 0
