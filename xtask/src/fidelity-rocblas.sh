#!/bin/bash
# Run inside the unstable ROCm chroot by `cargo xtask fidelity --rocblas`
# (xtask/src/fidelity_rocblas.rs):  fidelity-rocblas.sh [resume]
# The real rocBLAS 6.4.4 (Debian's orig tarball, the profile's URL and
# SHA-256) with Tensile be49885f (a shallow copy at the pinned commit,
# served from /fid/rocblas/tensile.git by git daemon) built for an RX 5500 XT (gfx1012,
# its recorded KFD topology) through the plain `rdna1-patch build rocblas`;
# then what a user checks: md5sum -c, the targets the code objects declare;
# then the set into a torch that bundles Debian's real librocblas 6.4.4 and
# its Tensile directory (and loads Debian's libMIOpen 6.4.3 from the
# system): doctor before, after rocBLAS, and after MIOpen's fix too (the
# whole torch), rollback of both byte for byte.
# Each step goes to results/steps.tsv (name, rc, seconds, what); a failed
# step is recorded and the steps that need it are not run.
set -u
F=/fid/rocblas
R=$F/results
. /fid/bn-kernels.sh
if [ "${1:-}" = resume ] && [ -f "$R/build.txt" ] && ! grep -q "^  Finished" "$R/build.txt"; then
    echo "$(grep -o '\[[0-9]*/[0-9]*\]' "$R/build.txt" | tail -1) built, then: $(grep -o 'was stopped: .*' "$R/build.txt" | tail -1)" >"$R/resumed.txt"
    mv "$R/build.txt" "$R/build-stopped.txt"
fi
# The cost lines a resumed run keeps (results_dir empties the .tsv files),
# but those of the builds named in $REDO, measured again (`--redo NAME`).
[ "${1:-}" = resume ] && [ -f "$R/cost.tsv" ] && cp "$R/cost.tsv" "$R/cost.keep"
results_dir
[ -f "$R/cost.keep" ] && mv "$R/cost.keep" "$R/cost.tsv"
redo() { case " ${REDO:-} " in *" $1 "*) return 0 ;; esac; return 1; }
for name in ${REDO:-}; do
    sed -i "/^$name\t/d" "$R/cost.tsv" 2>/dev/null
done
rm -f "$R"/*.txt.tmp
[ "${1:-}" = resume ] || rm -f "$R/resumed.txt" "$R/build-stopped.txt"
export RDNA1_PATCH_SYSFS=$F/sysfs
dpkg-query -W -f '${Package}\t${Version}\n' hipcc libamdhip64-dev librocblas-dev \
    librocblas4 clang-21 cmake ninja-build python3-yaml python3-msgpack ccache \
    >"$R/toolchain.tsv"
rdna1-patch --version | head -1 >"$R/tool.txt"

# The built-in profile, its Tensile served from here (the only change).
rm -rf "$F/cfg"
rdna1-patch profiles export rocm-6.4.3 "$F/cfg" >/dev/null || { step export 1 0 "profiles export failed"; exit 1; }
TOML=$F/cfg/rocm-6.4.3.toml
sed -i 's|^url = "https://github.com/ROCm/Tensile.git"|url = "git://127.0.0.1:9419/tensile.git"|' "$TOML"
grep -q 'git://127.0.0.1:9419/tensile.git' "$TOML" || { step export 1 0 "the profile names no Tensile URL to serve"; exit 1; }
echo "Debian's rocblas_6.4.4.orig.tar.gz from the profile's URL (its SHA-256 pinned); Tensile $(git --git-dir=$F/tensile.git rev-parse HEAD) from a shallow copy of github:ROCm/Tensile at the pinned commit, served by git daemon on 127.0.0.1" >"$R/source.txt"

W=$F/work
P=$F/prefix
if [ "${1:-}" != resume ] || redo tool; then
    rm -rf "$W" "$P"
fi
# measure NAME OUT CMD...: CMD run with its output in OUT, and a line of
# $R/cost.tsv in place of NAME's earlier one: name, exit, wall s, CPU s of CMD and every process it
# waited for, CPU s of the whole machine meanwhile (/proc/stat: anything
# else running counts too), cores, and the 1-minute load at the start, its
# mean (sampled every 30 s) and at the end. A build at -j2 is itself a
# load of about 2 on these 2 cores.
measure() {
    local name=$1 out=$2
    shift 2
    sed -i "/^$name\t/d" "$R/cost.tsv" 2>/dev/null
    python3 - "$name" "$R/cost.tsv" "$out" "$@" <<'PY'
import os, resource, subprocess, sys, threading, time
name, tsv, out, cmd = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
def busy():
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return (sum(f) - f[3] - f[4]) / os.sysconf("SC_CLK_TCK")
load = lambda: os.getloadavg()[0]
samples, done = [load()], threading.Event()
def sample():
    while not done.wait(30):
        samples.append(load())
threading.Thread(target=sample, daemon=True).start()
t, b = time.monotonic(), busy()
with open(out, "w") as f:
    rc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT).returncode
wall, machine = time.monotonic() - t, busy() - b
done.set()
u = resource.getrusage(resource.RUSAGE_CHILDREN)
with open(tsv, "a") as f:
    f.write(f"{name}\t{rc}\t{wall:.0f}\t{u.ru_utime + u.ru_stime:.0f}\t{machine:.0f}\t{os.cpu_count()}"
            f"\t{samples[0]:.2f}\t{sum(samples) / len(samples):.2f}\t{load():.2f}\n")
sys.exit(rc)
PY
}
costed() { grep -q "^$1	0	" "$R/cost.tsv" 2>/dev/null; }
ccache_stats() { # NAME: ccache's counters over that build (zeroed before it)
    ccache -s >"$R/ccache-$1.txt" 2>&1
}

t=$(now)
# The plain command; only the paths and the topology are ours. Cold: the
# compiler cache is emptied first (the tool uses ccache when installed).
if [ "${1:-}" != resume ]; then
    ccache -C -z >/dev/null 2>&1
    rm -f "$R/cost.tsv" "$R"/ccache-*.txt
elif redo tool; then
    ccache -C -z >/dev/null 2>&1
else
    ccache -z >/dev/null 2>&1
fi
# Resumed: after a measured build, the command again finds nothing to do
# (the no-op rebuild); after a stopped one, it builds the rest.
name=tool
if redo tool; then
    :
elif costed tool; then
    name=noop
elif [ "${1:-}" = resume ]; then
    name=tool-resumed
fi
measure $name "$R/build.txt" rdna1-patch build rocblas --profile "$TOML" --rocm /usr --work-dir "$W" --prefix "$P"
rc=$?
ccache_stats "$name"
step build $rc "$(since "$t")" "rdna1-patch build rocblas --profile rocm-6.4.3 --rocm /usr (gfx1012 topology)"
[ $rc = 0 ] || exit 1

# The first build of this work dir, from the tool's own log of it: its
# start is in the log's name, its end the log's last write (a resumed run
# finds the build up to date and takes seconds).
first=$(ls "$W"/rocm-6.4.3/rocblas/logs/*-build.log 2>/dev/null | head -1)
if [ -n "$first" ]; then
    name=${first##*/}
    s=$(date -d "$(echo "${name%-build.log}" | sed 's/T\(..\)\(..\)\(..\)Z/ \1:\2:\3Z/')" +%s)
    printf 'build (its first run, from its log)\t0\t%s\t%s: %s\n' "$(($(stat -c %Y "$first") - s))" "$name" \
        "$(grep -o '\[[0-9]*/[0-9]*\]' "$first" | tail -1)" >"$R/first-build.txt"
fi

t=$(now)
(cd "$P" && md5sum -c --quiet share/rdna1-patch/MD5SUMS) >"$R/md5sum.txt" 2>&1
rc=$?
echo "$(wc -l <"$P/share/rdna1-patch/MD5SUMS") files listed; $(grep -c . "$R/md5sum.txt") failed" >>"$R/md5sum.txt"
step md5sum $rc "$(since "$t")" "md5sum -c share/rdna1-patch/MD5SUMS in the prefix"

# What each code object declares, read by LLVM's own tool.
readelf=$(hipconfig --hipclangpath)/llvm-readelf
[ -x "$readelf" ] || readelf=$(command -v llvm-readelf-21 || command -v llvm-readelf)
for f in "$P"/lib/rocblas/library/*.hsaco "$P"/lib/rocblas/library/*.co; do
    [ -e "$f" ] || continue
    printf '%s\t%s\n' "${f##*/}" "$("$readelf" -h "$f" | sed -n 's/.*Flags: *//p' | head -1)"
done >"$R/targets.tsv"
du -sb "$P" "$W" /root/.cache/ccache 2>/dev/null | awk '{printf "%s\t%.0f MB\n", $2, $1 / 1e6}' >"$R/disk.tsv"

torch_steps() {
# A torch of the user's that bundles Debian's real librocblas 6.4.4 and its
# Tensile directory, its libtorch_hip.so built for gfx1012 by the chroot's
# clang (so torch itself has code for the card) and loading the bundled
# librocblas through $ORIGIN and Debian's libMIOpen 6.4.3 from the system
# (ld.so.cache), as a torch built against Debian's ROCm does.
export DEBIAN_FRONTEND=noninteractive
apt-get -o 'Acquire::Check-Valid-Until=false' install -y -q libmiopen1 >/dev/null 2>&1 ||
    { apt-get -o 'Acquire::Check-Valid-Until=false' update -qq && apt-get -o 'Acquire::Check-Valid-Until=false' install -y -q libmiopen1 >/dev/null; }
T=$F/torch
rm -rf "$T" "$F/miopen-prefix"
torch=$T/site/torch
mkdir -p "$torch/lib"
lib=$(readlink -f /usr/lib/x86_64-linux-gnu/librocblas.so.4)
cp -a "$lib" "$torch/lib/librocblas.so.4"
tensile=$(dirname "$lib")/rocblas/library
[ -d "$tensile" ] || tensile=$(find /usr/lib/x86_64-linux-gnu -type d -path '*rocblas*/library' | head -1)
mkdir -p "$torch/lib/rocblas"
cp -a "$tensile" "$torch/lib/rocblas/library"
hip=$(hipconfig --version | cut -d- -f1)
printf "__version__ = '2.9.1+rocm6.4'\ncuda = None\nhip = '%s'\n" "$hip" >"$torch/version.py"
printf 'import ctypes, os\n_C = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libtorch_hip.so"), mode=ctypes.RTLD_GLOBAL)\n' >"$torch/__init__.py"
cat >"$T/k.hip" <<'HIP'
typedef struct { unsigned x, y, z; } dim3_t;
extern "C" int hipLaunchKernel(const void*, dim3_t, dim3_t, void**, unsigned long, void*);
__attribute__((global)) void k(int* p) { *p = 1; }
HIP
"$(hipconfig --hipclangpath)/clang++" -x hip -nogpulib -nogpuinc -fPIC -shared \
    --offload-arch=gfx1012 "$T/k.hip" -Wl,--no-as-needed -Wl,-rpath,'$ORIGIN' \
    -L"$torch/lib" -l:librocblas.so.4 -l:libMIOpen.so.1 -lamdhip64 -o "$torch/lib/libtorch_hip.so" >"$R/torch-link.txt" 2>&1 ||
    { step torch 1 0 "libtorch_hip.so did not link: $(head -1 "$R/torch-link.txt")"; return; }
snap() { (cd "$torch" && find . -printf '%y %m %p %l\n' | sort && find . -type f -print0 | sort -z | xargs -0 sha256sum); }
snap >"$T/before.sha256"
echo "Debian's $(dpkg-query -W -f '${Package} ${Version}' librocblas4): $lib and $tensile ($(ls "$tensile" | wc -l) files), bundled in $torch/lib" >"$R/torch.txt"

run() { rdna1-patch "$@" --state-dir "$T/state"; }
t=$(now)
run doctor --torch-dir "$torch" >"$R/doctor-before.txt" 2>&1
rc=$?
step doctor-before "$([ $rc = 1 ] && echo 0 || echo "$rc")" "$(since "$t")" "doctor on Debian's librocblas for gfx1012 (exit $rc; 1 expected)"

t=$(now)
run install rocblas --into-torch --prefix "$P" --torch-dir "$torch" >"$R/install.txt" 2>&1
rc=$?
step install $rc "$(since "$t")" "install rocblas --into-torch --prefix <the prefix>"
if [ $rc = 0 ]; then
    t=$(now)
    run doctor --torch-dir "$torch" >"$R/doctor-after.txt" 2>&1
    rc=$?
    step doctor-rocblas "$([ $rc = 1 ] && echo 0 || echo "$rc")" "$(since "$t")" "doctor after rocBLAS's install (exit $rc; 1 expected: MIOpen's batch norm still fails)"
    mv "$R/doctor-after.txt" "$R/doctor-rocblas.txt"
    t=$(now)
    run install --into-torch --profile rocm-6.4.3 --prefix "$F/miopen-prefix" --torch-dir "$torch" >"$R/install-miopen.txt" 2>&1
    step install-miopen $? "$(since "$t")" "install --into-torch (MIOpen's batch-norm fix, the system route)"
    t=$(now)
    run doctor --torch-dir "$torch" >"$R/doctor-after.txt" 2>&1
    rc=$?
    step doctor-after $rc "$(since "$t")" "doctor after both (exit $rc; 0 expected)"
    run verify --torch-dir "$torch" >"$R/verify.txt" 2>&1
    step verify $? 0 "verify"
    run status >"$R/status.txt" 2>&1
    step status $? 0 "status"
    t=$(now)
    run rollback --to 1 >"$R/rollback.txt" 2>&1
    rc=$?
    step rollback $rc "$(since "$t")" "rollback --to 1"
    snap >"$T/after.sha256"
    cmp -s "$T/before.sha256" "$T/after.sha256"
    rc=$?
    step bytes $rc 0 "every file of torch as before the install ($(find "$torch" -type f | wc -l) files by SHA-256, every entry's type, mode and link)"
fi
}
torch_steps

# rocBLAS's own build of the same source, targets and Tensile options:
# the configure the tool ran (from its log), without the compiler launcher,
# into a build dir and prefix of its own, then `cmake --build` with the
# tool's jobs and `cmake --install`; with Tensile's two tool paths, which
# the tool sets for Debian's layout (rocBLAS finds neither there), and no
# compiler cache.
if ! costed own && [ -n "$first" ]; then
    O=$F/own
    rm -rf "$O"
    mkdir -p "$O"
    read -ra cfg <<<"$(grep -m1 '^\$ cmake -S ' "$first" | cut -c3-)"
    jobs=$(grep -m1 '^\$ cmake --build ' "$first" | sed -n 's/.*--parallel \([0-9]*\).*/\1/p')
    args=()
    for ((i = 1; i < ${#cfg[@]}; i++)); do
        case ${cfg[i]} in
        -DCMAKE_*_COMPILER_LAUNCHER=*) ;;
        -DCMAKE_INSTALL_PREFIX=*) args+=("-DCMAKE_INSTALL_PREFIX=$O/prefix") ;;
        -B) args+=(-B "$O/build"); i=$((i + 1)) ;;
        *) args+=("${cfg[i]}") ;;
        esac
    done
    hipdir=$(hipconfig --hipclangpath)
    {
        echo "set -e"
        echo "export CCACHE_DISABLE=1 TENSILE_ROCM_ASSEMBLER_PATH=$hipdir/clang++ TENSILE_ROCM_OFFLOAD_BUNDLER_PATH=$hipdir/clang-offload-bundler"
        # Quoted: CMAKE_PREFIX_PATH's list has a ';'.
        echo "cmake $(printf '%q ' "${args[@]}")"
        echo "cmake --build $O/build --parallel ${jobs:-$(nproc)}"
        echo "cmake --install $O/build"
    } >"$O/own.sh"
    cp "$O/own.sh" "$R/own-command.txt"
    if [ ${#args[@]} = 0 ]; then
        step own 1 0 "no configure command in the tool's log $first"
    else
        t=$(now)
        measure own "$R/own-build.txt" bash "$O/own.sh"
        rc=$?
        step own $rc "$(since "$t")" "rocBLAS's own cmake build of the same source, targets and options"
        du -sb "$O/build" | awk '{printf "%s\t%.0f MB\n", $2, $1 / 1e6}' >>"$R/disk.tsv"
    fi
fi

# The tool's rebuild from a fresh build dir with its compiler cache warm.
if ! costed warm; then
    ccache -z >/dev/null 2>&1
    t=$(now)
    measure warm "$R/warm.txt" rdna1-patch build rocblas --profile "$TOML" --rocm /usr --work-dir "$W" --prefix "$P" --clean
    rc=$?
    step warm $rc "$(since "$t")" "rdna1-patch build rocblas --clean (a fresh build dir, ccache warm)"
    ccache_stats warm
fi
exit 0
