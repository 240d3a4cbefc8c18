#!/bin/bash
# cargo xtask bench's real-MIOpen row, run inside the rocm-env chroot: four
# representative MIOpen translation units built with GPU_TARGETS=gfx1010
# against all three gfx101x arches, then a ccache-warm rebuild of them. It
# uses the checkout `cargo xtask fidelity --profile $1` left in /fid/$1.
# Prints `name seconds` lines. The build chooses its own compat fixes for
# Debian's ROCm (Boost 1.92, the bare half.hpp), as the full build did.
set -u
P=$1
F=/fid/$P
TUS="src/convolution_api.cpp src/solver/batchnorm/forward_spatial_single.cpp src/ocl/convolutionocl.cpp src/hip/handlehip.cpp"
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
# ccache for the warm rebuild, GoogleTest for the BUILD_TESTING=ON configure;
# installed here, not in the chroot's package list, whose change rebuilds it.
missing=""
for pkg in ccache libgtest-dev libgmock-dev; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
    apt-get -o Acquire::Check-Valid-Until=false update -qq >/dev/null &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null ||
        { echo "cannot install$missing"; exit 1; }
fi
configure() { # work-dir gpu-targets launcher
    rdna1-patch build miopen --profile "$F/cfg/$P.toml" --rocm /usr --work-dir "$1" \
        --prefix "$1/prefix" --gpu-targets "$2" --launcher "$3" \
        --stop-after configure -j 2 >"$1.log" 2>&1 || { echo "configure-failed $1"; exit 1; }
}
objects() { # build-dir
    for tu in $TUS; do
        ninja -C "$1" -t targets all | sed -n "s|^\(.*/${tu#src/}\.o\): .*|\1|p" | head -1
    done
}
compile() { # build-dir: the four objects from scratch on 2 jobs; prints seconds
    local objs
    objs=$(objects "$1")
    (cd "$1" && rm -f $objs)
    local t
    t=$(now)
    ninja -C "$1" -j 2 $objs >"$1.ninja.log" 2>&1 || { echo "compile-failed $1"; tail -5 "$1.ninja.log"; exit 1; }
    since "$t"
}
steps() { # build-dir: commands of the default build
    ninja -C "$1" -t commands 2>/dev/null | wc -l
}
for v in driver:"-D MIOPEN_BUILD_DRIVER=ON" tests:"-D MIOPEN_BUILD_DRIVER=ON -D BUILD_TESTING=ON"; do
    W=/tmp/bench-$P-steps-${v%%:*}
    # shellcheck disable=SC2086
    rdna1-patch build miopen --profile "$F/cfg/$P.toml" --rocm /usr --work-dir "$W" \
        --prefix "$W/prefix" --gpu-targets gfx1010 --launcher none ${v#*:} \
        --stop-after configure -j 2 >"$W.log" 2>&1 || { echo "configure-failed $W"; exit 1; }
    echo "steps_${v%%:*} $(steps "$W/$P/miopen/build")"
done
for v in one:gfx1010 three:gfx1010,gfx1011,gfx1012; do
    W=/tmp/bench-$P-${v%%:*}
    configure "$W" "${v#*:}" none
    [ "${v%%:*}" = one ] && echo "steps_lib $(steps "$W/$P/miopen/build")"
    echo "${v%%:*} $(compile "$W/$P/miopen/build")"
done
W=/tmp/bench-$P-ccache
export CCACHE_DIR=/tmp/bench-$P-ccache-dir
rm -rf "$CCACHE_DIR"
configure "$W" gfx1010 ccache
echo "ccache_cold $(compile "$W/$P/miopen/build")"
echo "ccache_warm $(compile "$W/$P/miopen/build")"
