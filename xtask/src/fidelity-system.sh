# The system route (issue 44) on Debian's real libmiopen1, in the unstable
# chroot, run by `sudo cargo xtask fidelity --system` (opt-in, not CI),
# which writes its log into FIDELITY.md.
# It makes a torch of the user's whose libtorch_hip.so (gfx1010 code, built
# by the chroot's clang) loads /usr/lib/x86_64-linux-gnu/libMIOpen.so.1
# through ld.so.cache (no run path: the shape where libtorch_hip.so gains
# RUNPATH $ORIGIN), then: install adds the fixed copy, `import torch` maps
# it, the system file's SHA-256 and `dpkg --verify` are unchanged, verify
# shows the chain, rollback restores libtorch_hip.so byte for byte and
# removes the copy. Any step that does not hold stops it (set -e).
set -euo pipefail
mkdir -p /fid/system
exec > >(tee /fid/system/log.txt) 2>&1
rdna1-patch --version | head -1
export DEBIAN_FRONTEND=noninteractive
apt-get -o 'Acquire::Check-Valid-Until=false' install -y -q libmiopen1 >/dev/null
lib=$(readlink -f /usr/lib/x86_64-linux-gnu/libMIOpen.so.1)
pkg=$(dpkg -S "$lib" | cut -d: -f1)
echo "system library: $lib ($(dpkg-query -W -f '${Package} ${Version}' "$pkg"))"
sum=$(sha256sum "$lib")
work=$(mktemp -d)
torch="$work/site/torch"
mkdir -p "$torch/lib"
hip=$(hipconfig --version | cut -d- -f1)
printf "__version__ = '2.9.1+rocm6.4'\ncuda = None\nhip = '%s'\n" "$hip" >"$torch/version.py"
printf 'import ctypes, os\n_C = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libtorch_hip.so"), mode=ctypes.RTLD_GLOBAL)\n' >"$torch/__init__.py"
cat >"$work/k.hip" <<'HIP'
typedef struct { unsigned x, y, z; } dim3_t;
extern "C" int hipLaunchKernel(const void*, dim3_t, dim3_t, void**, unsigned long, void*);
__attribute__((global)) void k(int* p) { *p = 1; }
HIP
"$(hipconfig --hipclangpath)/clang++" -x hip -nogpulib -nogpuinc -fPIC -shared \
    --offload-arch=gfx1010 "$work/k.hip" -Wl,--no-as-needed -l:libMIOpen.so.1 -lamdhip64 \
    -o "$torch/lib/libtorch_hip.so"
cp "$torch/lib/libtorch_hip.so" "$work/libtorch_hip.so.orig"
maps() { PYTHONPATH="$work/site" python3 -c 'import torch; print(open("/proc/self/maps").read())' | grep -o '/[^ ]*libMIOpen[^ ]*' | sort -u; }
echo "before: $(maps)"
run() { rdna1-patch "$@" --state-dir "$work/state"; }
# doctor over Debian's libMIOpen and the librocblas it loads, with its
# Tensile directory: the xtask holds every line to a glance.
run doctor --profile rocm-6.4.3 --torch-dir "$torch" >/fid/system/doctor.txt 2>&1 || true
run install --into-torch --profile rocm-6.4.3 --prefix "$work/prefix" --torch-dir "$torch"
echo "after: $(maps)"
test "$(maps)" = "$torch/lib/libMIOpen.so.1"
echo "$sum" | sha256sum -c -
test -z "$(dpkg --verify "$pkg")"
run verify --runtime --compile --prefix "$work/prefix" --torch-dir "$torch" | tee /fid/system/verify.txt
run status --prefix "$work/prefix" | tee /fid/system/status.txt
run rollback
cmp "$torch/lib/libtorch_hip.so" "$work/libtorch_hip.so.orig"
test ! -e "$torch/lib/libMIOpen.so.1"
test "$(maps)" = "$lib"
echo "$sum" | sha256sum -c -
echo "system route on Debian's $pkg: ok"
