#!/bin/bash
# Run inside the ROCm chroot by `cargo xtask fidelity` (xtask/src/fidelity.rs):
#   fidelity.sh PROFILE [full [resume]]
# with the MIOpen tree at /src and the shipped compat series at /fid/compat
# (those the build chose are compiled too).
# Every result goes to /fid/PROFILE/results/*.tsv; the xtask turns them into
# FIDELITY.md. A failing step is recorded, not fatal, so one run reports all.
set -u
P=$1
F=/fid/$P
R=$F/results
. /fid/bn-kernels.sh
if [ "${2:-}" = full ] && [ "${3:-}" = resume ] && [ -f "$R/build.log" ]; then
    # What the stopped run got to, said before results_dir clears its log.
    echo "$(grep -o '\[[0-9]*/[0-9]*\]' "$R/build.log" | tail -1) built, then: $(grep -o 'was stopped: .*' "$R/build.log" | tail -1)" >"$R/resumed.txt"
    mv "$R/build.log" "$R/build-stopped.txt"
fi
results_dir

dpkg-query -W -f '${Package}\t${Version}\n' hipcc libamdhip64-dev libamd-comgr-dev \
    librocblas-dev libhiprtc-builtins6 rocm-cmake clang-21 cmake ninja-build libboost-dev \
    >"$R/toolchain.tsv"
rdna1-patch --version | head -1 >"$R/tool.txt"

# The source: a git checkout that holds the profile's pinned commit is used as
# it is; a plain tree (what `fetch` snapshots give, blob by blob) is committed
# and tagged in a local repository, and the profile's commit pin is dropped.
rm -rf "$F/cfg"
rdna1-patch profiles export "$P" "$F/cfg" >/dev/null || { step export 1 0 "profiles export failed"; exit 1; }
TOML=$F/cfg/$P.toml
TAG=$(sed -n 's/^tag = "\(.*\)"/\1/p' "$TOML")
SERIES=$F/cfg/$(sed -n 's/^patches = "\(.*\)"/\1/p' "$TOML")
PIN=$(sed -n 's/^commit = "\(.*\)"/\1/p' "$TOML")
if [ -n "$PIN" ] && git -C /src cat-file -e "$PIN^{commit}" 2>/dev/null; then
    ORIGIN=/src
    echo "git checkout at /src holding the pinned commit $PIN" >"$R/source.txt"
else
    ORIGIN=$F/origin
    if ! git -C "$ORIGIN" rev-parse -q --verify "refs/tags/$TAG" >/dev/null 2>&1; then
        rm -rf "$ORIGIN"
        mkdir -p "$ORIGIN"
        cp -a /src/. "$ORIGIN/"
        rm -rf "$ORIGIN/.git"
        git -C "$ORIGIN" init -q
        git -C "$ORIGIN" add -A
        git -C "$ORIGIN" -c user.name=fidelity -c user.email=fidelity@localhost \
            commit -qm "MIOpen $TAG tree" || { step origin 1 0 "cannot commit the tree"; exit 1; }
        git -C "$ORIGIN" tag "$TAG"
    fi
    echo "plain tree at /src ($(find /src -type f | wc -l) files), committed to a local repository and tagged $TAG; the profile's commit pin ($PIN) dropped" >"$R/source.txt"
    sed -i '/^commit = /d' "$TOML"
fi
sed -i "s|^url = .*|url = \"$ORIGIN\"|" "$TOML"

# full: the whole build through the plain command, in a work dir of its own,
# then what a user checks: md5sum -c and verify. Nothing else runs.
if [ "${2:-}" = full ]; then
    W=$F/full-work
    if [ "${3:-}" != resume ]; then
        rm -rf "$W" "$F/full-prefix" "$R/resumed.txt"
    fi
    nproc >"$R/cores.txt"
    t=$(now)
    rdna1-patch build miopen --profile "$TOML" --rocm /usr --work-dir "$W" \
        --prefix "$F/full-prefix" --gpu-targets gfx1010 >"$R/build.log" 2>&1
    rc=$?
    step build "$rc" "$(since "$t")" "rdna1-patch build miopen --rocm /usr --gpu-targets gfx1010"
    grep -o 'Compat .*' "$R/build.log" >"$R/compat.txt"
    # What the tool said of the build stage: its steps and time.
    grep -o 'Build [0-9]* steps in [^,]*' "$R/build.log" | tail -1 >"$R/ninja-steps.txt"
    grep -o 'FAILED: .*' "$R/build.log" >"$R/failed.txt"
    [ "$rc" = 0 ] || exit 0
    t=$(now)
    (cd "$F/full-prefix" && md5sum -c share/rdna1-patch/MD5SUMS) >"$R/md5.txt" 2>&1
    step "md5sum -c" "$?" "$(since "$t")" "$(grep -c ': OK$' "$R/md5.txt") files OK"
    t=$(now)
    rdna1-patch verify --prefix "$F/full-prefix" >"$R/verify.txt" 2>&1
    step verify "$?" "$(since "$t")" "$(head -1 "$R/verify.txt")"
    du -sh "$F/full-prefix" | cut -f1 >"$R/size.txt"
    exit 0
fi

# 1. configure through the tool, as a user would, with Debian's ROCm at /usr.
W=$F/work
t=$(now)
# No toolchain flag, define or extra series: what Debian's ROCm needs is
# found from its headers (compat); --gpu-targets only saves time.
rdna1-patch build miopen --profile "$TOML" --rocm /usr --work-dir "$W" \
    --prefix "$F/prefix" --gpu-targets gfx1010 --stop-after configure -j 2 \
    >"$R/configure.log" 2>&1
rc=$?
step configure "$rc" "$(since "$t")" "rdna1-patch build miopen --rocm /usr --gpu-targets gfx1010 --stop-after configure"
grep -o 'Compat .*' "$R/configure.log" >"$R/compat.txt"
[ "$rc" = 0 ] || exit 0
SRC=$W/$P/miopen/src
B=$W/$P/miopen/build

# 2. every C++ translation unit the series (and the compat series) touches.
compat_series=$(sed -n 's|.*series compat/\([a-z0-9.-]*\).*|/fid/compat/\1|p' "$R/compat.txt")
tus=$(cat "$SERIES"/*.patch $(for d in $compat_series; do echo "$d"/*.patch; done) |
    sed -n 's|^+++ b/\(src/.*\.cpp\)$|\1|p' | grep -v '^src/kernels/' | sort -u)
ninja -C "$B" -t targets all >"$R/targets.txt" 2>/dev/null
for tu in $tus; do
    obj=$(grep -o "^[^:]*/$(basename "$tu")\.o" "$R/targets.txt" | grep -F "${tu#src/}.o" | head -1)
    if [ -z "$obj" ]; then
        step "tu $tu" 1 0 "no ninja target"
        continue
    fi
    t=$(now)
    ninja -C "$B" -j 2 "$obj" >"$R/tu.log" 2>&1
    rc=$?
    step "tu $tu" "$rc" "$(since "$t")" "$obj"
    [ "$rc" = 0 ] || tail -20 "$R/tu.log" >>"$R/tu-failures.log"
done

# 3. the batch-norm kernels, pristine (the commit's own src/kernels and the
# solvers' pristine flags) and patched, with clang as MIOpen's offline OpenCL
# path runs it (hipoc_program.cpp), for gfx101x and a gfx1030 control.
rm -rf "$F/pristine"
mkdir -p "$F/pristine"
git -C "$SRC" archive HEAD src/kernels src/solver/batchnorm | tar -x -C "$F/pristine"
flags_of() { # tree: the MIO_BN_GFX*X names its batch-norm solvers set
    grep -ho '"MIO_BN_GFX[0-9]*X"' "$1/src/solver/batchnorm/"*.cpp | tr -d '"' | sort -u
}
flags_pristine=$(flags_of "$F/pristine")
flags_patched=$(flags_of "$SRC")
echo "pristine: $flags_pristine" | tr '\n' ' ' >"$R/flags.txt"
echo >>"$R/flags.txt"
echo "patched: $flags_patched" | tr '\n' ' ' >>"$R/flags.txt"
PRISTINE=$F/pristine PATCHED=$SRC
bn_kernels
exit 0
