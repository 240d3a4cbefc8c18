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

# The OpenCL harness's clang is clang-21, with its device libraries, in both chroots (clang 22 makes
# some fp16 kernels' pointer warnings errors for every arch). Installed here,
# not in the chroot's package list, whose change rebuilds it.
dpkg -s clang-21 rocm-device-libs-21 >/dev/null 2>&1 ||
    DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false install -y -qq clang-21 rocm-device-libs-21 >"$R/clang-install.log" 2>&1
CLANG=$(command -v clang-21 || ls /usr/lib/llvm-*/bin/clang 2>/dev/null | sort -V | tail -1)
export CLANG
"$CLANG" --version | head -1 >"$R/clang.txt"
dpkg-query -W -f '${Package}\t${Version}\n' binutils clang-21 rocm-device-libs-21 hipcc \
    libamd-comgr3 libamd-comgr2 libhiprtc7 libhiprtc6 libamdhip64-6 libamdhip64-7 >"$R/toolchain.tsv" 2>/dev/null
rdna1-patch --version | head -1 >"$R/tool.txt"

# 1. The package, from whichever suite carries this version.
rm -rf "$F/deb" "$F/x" "$F/pristine" "$F/patched" "$F/fixed"
mkdir -p "$F/deb"
t=$(now)
(cd "$F/deb" && apt-get -o Acquire::Check-Valid-Until=false download "libmiopen1=$V*" -t experimental >"$R/download.log" 2>&1 ||
    apt-get download "libmiopen1=$V*" >>"$R/download.log" 2>&1)
deb=$(ls "$F"/deb/libmiopen1_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || { step download 1 "$(since "$t")" "apt-get download libmiopen1=$V"; exit 1; }
step download 0 "$(since "$t")" "$(basename "$deb") ($(stat -c %s "$deb") bytes)"
# What it needs to load (step 4 loads it): the package itself, installed.
t=$(now)
DEBIAN_FRONTEND=noninteractive apt-get -o Acquire::Check-Valid-Until=false install -y -qq --no-install-recommends "$deb" >"$R/deps.log" 2>&1
step install "$?" "$(since "$t")" "apt-get install $(basename "$deb") with its dependencies"
dpkg-deb -x "$deb" "$F/x"
lib=$(find "$F/x" -name 'libMIOpen.so.1*' -type f | head -1)
echo "Debian's $(basename "$deb"): $(basename "$lib"), $(stat -c %s "$lib") bytes; kernel texts from its MIOPEN_KERNEL_* symbols" >"$R/source.txt"

# 2. Its batch-norm kernel texts, pristine and patched.
t=$(now)
python3 /fid/release_kernels.py "$lib" "$F/pristine" >"$R/extract.log" 2>&1
rc=$?
step extract "$rc" "$(since "$t")" "$(grep -c '\.cl$' "$R/extract.log") OpenCL and $(grep -c 'HIP\.cpp$' "$R/extract.log") HIP batch-norm kernels, $(grep -vc '\.cl$\|HIP\.cpp$' "$R/extract.log") headers, from $(basename "$lib")"
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

# 4. The in-place route on the library itself, as a user runs it: a torch
# whose lib/ holds this libMIOpen, with the suite's comgr beside it (a
# link, as the system's own). --in-place, since this torch has no GPU code
# to tell what MIOpen sees.
case $V in 6.4*) P=rocm-6.4.3 ;; 7.2*) P=rocm-7.2 ;; *) P= ;; esac
[ -n "$P" ] || exit 0
S=$F/site
T=$S/torch
rm -rf "$S" "$F/ip-prefix" "$F/ip-state"
mkdir -p "$T/lib"
printf "__version__ = '2.7.0+rocm%s'\ncuda = None\nhip = '%s'\n" "$V" "$V" >"$T/version.py"
cp "$lib" "$T/lib/libMIOpen.so"
comgr=$(ls /usr/lib/x86_64-linux-gnu/libamd_comgr.so.[0-9] | tail -1)
ln -s "$comgr" "$T/lib/$(basename "$comgr")"
# And the hipRTC the library loads, for its HIP kernels.
hiprtc=$(ls /usr/lib/x86_64-linux-gnu/libhiprtc.so.[0-9] 2>/dev/null | tail -1)
[ -z "$hiprtc" ] || ln -s "$hiprtc" "$T/lib/$(basename "$hiprtc")"
ip() { rdna1-patch "$@" --torch-dir "$T" --state-dir "$F/ip-state"; }
# doctor as a user reads it, before and after the fix, and status: the
# xtask holds every line to a glance (160 characters).
# Cold: no verdict or compile kept from an earlier run of this harness.
rm -rf "${XDG_CACHE_HOME:-$HOME/.cache}/rdna1-patch"
ip doctor --profile "$P" >"$R/doctor.txt" 2>&1
t=$(now)
# Every line whole (--detail): the summaries keep their compile counts.
ip install --detail --into-torch --in-place --profile "$P" --prefix "$F/ip-prefix" >"$R/inplace.log" 2>&1
rc=$?
step "in place" "$rc" "$(since "$t")" "$(grep -o '[0-9]* of [0-9]* kernel texts fixed.*' "$R/inplace.log" | head -1)"
# The diagnosis by compile it acted on, and the proof of its fix, as the
# user reads them.
grep -E '^ *(Kernel|Diagnosis|Proven) ' "$R/inplace.log" | sed 's/^ *//' >"$R/diagnosis.txt"
grep -q '^Diagnosis ' "$R/diagnosis.txt"
step diagnosis "$?" 0 "$(grep -o '^Diagnosis [0-9]* of [0-9]* batch-norm kernels' "$R/diagnosis.txt" | head -1) fail for gfx1010"
grep -q '^Proven ' "$R/diagnosis.txt"
step proof "$?" 0 "$(grep '^Proven ' "$R/diagnosis.txt" | cut -c8- | cut -d'(' -f1)"
[ "$rc" = 0 ] || exit 0
fixed=$T/lib/libMIOpen.so
ip doctor --profile "$P" >"$R/doctor-fixed.txt" 2>&1
rdna1-patch status --prefix "$F/ip-prefix" --state-dir "$F/ip-state" >"$R/status.txt" 2>&1
changed=$(cmp -l "$lib" "$fixed" | wc -l)
hdr() { readelf -W -h -l -S --dyn-syms "$1" | grep -v '^File:'; }
diff <(hdr "$lib") <(hdr "$fixed") >"$R/elf.diff"
step "elf" "$?" 0 "$changed bytes differ, all inside kernel texts (checked by the tool); ELF header, program headers, sections and dynamic symbols identical"
for a in gfx1010 gfx1011 gfx1012 gfx1030; do
    ip verify --compile --compile-for "$a" --profile "$P" --prefix "$F/ip-prefix" >"$R/compile-$a.log" 2>&1
    row=$(grep -E '^(ok|FAIL) +kernels' "$R/compile-$a.log" | head -1 | tr -s ' ' | tr '\t' ' ')
    case $row in "ok kernels"*) rc=0 ;; *) rc=1 ;; esac
    step "compile $a" "$rc" 0 "${row:-no kernels row: see compile-$a.log}"
done
# 5. 7.x's HIP kernels, as hipRTC compiles them: the texts of the pristine
# library and of the fixed one.
if ! ls /usr/lib/x86_64-linux-gnu/libhiprtc.so.[0-9] >/dev/null 2>&1; then
    echo "no hipRTC in this chroot: the HIP kernels were not compiled" >"$R/hip-skipped.txt"
elif ls "$F"/pristine/src/kernels/*HIP.cpp >/dev/null 2>&1; then
    t=$(now)
    python3 /fid/release_kernels.py "$fixed" "$F/fixed" >/dev/null 2>"$R/hip-extract.log" &&
        python3 /fid/release_hip.py "$F/pristine" "$F/fixed" >"$R/hip.tsv" 2>"$R/hip-errors.log"
    step "hip" "$?" "$(since "$t")" "$(wc -l <"$R/hip.tsv") HIP compiles through hipRTC: $(cut -f1 "$R/hip.tsv" | sort -u | tr '\n' ' ')"
fi
python3 - "$fixed" >"$R/load.txt" 2>&1 <<'PY'
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
v = [ctypes.c_size_t() for _ in range(3)]
lib.miopenGetVersion(*[ctypes.byref(x) for x in v])
print("miopenGetVersion: %d.%d.%d" % tuple(x.value for x in v))
PY
step "load" "$?" 0 "$(tail -1 "$R/load.txt")"
exit 0
