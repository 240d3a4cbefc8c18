# Shared by fidelity.sh and fidelity-release.sh (sourced first): the
# results dir and step log, and the batch-norm kernel harness, bn_kernels:
# compile every OpenCL batch-norm kernel of $PRISTINE and $PATCHED (each with
# src/kernels), every variant in the cases torch reaches (fp32, and mixed
# as the kernel's solver spells it; never pure fp16), for gfx1010/1011/1012
# and a gfx1030 control, with clang as MIOpen's offline OpenCL path runs it
# (hipoc_program.cpp), the MIO_BN_GFX*X names in $flags_pristine /
# $flags_patched set as the solvers set them. Writes $R/kernels.tsv.

# $F and $R (set by the caller) made ready, and the step log's helpers.
results_dir() {
    mkdir -p "$R"
    rm -f "$R"/*.tsv "$R"/*.log
    export PATH=/usr/local/bin:$PATH
}
step() { # name rc seconds detail
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$R/steps.tsv"
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# Sizes as the solvers pick them: N=32, C=64, a workgroup of 1024 (LDS
# 1024, 16 wavefronts) and, per variant, an image size that selects it
# (0: HW <= 512, 1 and 2: HW > 1024, 3: 512 < HW <= 1024). The
# per-activation kernels have no variants and take 256 wide groups.
common="-DMIO_SAVE_MEAN_VARIANCE=1 -DMIO_RUNNING_RESULT=1 -DMIO_BN_N=32 -DMIO_BN_C=64
 -DMIO_BN_GRP1=1 -DMIO_BN_GRP2=1 -DMIO_BN_NGRPS=4 -DMIO_BN_USESAVED=1
 -DMIO_WAVESIZE=64 -DMIO_LAYOUT_NHWC=0 -DMIO_BN_CBA_WRITE_INTERMEDIATE=0
 -DMIOPEN_YES_ACTIV=1 -DMIOPEN_NRN_OP_ID=3 -DMIOPEN_READ_UNIT=4 -DMIOPEN_READ_TYPE=_FLOAT"
shape() { # variant -> the size defines
    local hw grp
    case $1 in
    0) hw=256 grp=1024 ;;
    1 | 2) hw=4096 grp=1024 ;;
    *) hw=1024 grp=1024 ;;
    esac
    [ "$1" = - ] && grp=256
    local nhw=$((32 * hw))
    local bits
    bits=$(python3 -c "import struct; print(struct.unpack('<I', struct.pack('<f', $nhw))[0])")
    echo "-DMIO_BN_HW=$hw -DMIO_BN_NHW=$nhw -DMIO_BN_CHW=$((64 * hw)) -DMIO_BN_NCHW=$((32 * 64 * hw))
 -DMIO_BN_NHW_FLOAT=$bits -DMIO_BN_GRP0=$grp -DMIO_BN_LDS_SIZE=$grp -DMIO_BN_LDSGCN_SIZE=$((grp / 64))"
}
clflags="-target amdgcn-amd-amdhsa -x cl -D__AMD__=1 -O3 -cl-kernel-arg-info
 -cl-denorms-are-zero -cl-std=CL2.0 -mllvm -amdgpu-early-inline-all
 -mllvm -amdgpu-internalize-symbols"
compile_one() {
    local k=$1 v=$2 prec=$3 arch=$4 tree=$5 dir flags defs=""
    if [ "$tree" = pristine ]; then dir=$PRISTINE; flags=$flags_pristine; else dir=$PATCHED; flags=$flags_patched; fi
    # Mixed precision as each solver spells it: the batch-norm solvers
    # MIOPEN_USE_FPMIX=1 alone, the fusion ones (MIOpenBatchNormActiv*)
    # MIOPEN_USE_FP16=1 with it (as src/verdict/cases.rs does).
    case $prec in
    fp32) defs="-DMIOPEN_USE_FP16=0 -DMIOPEN_USE_FP32=1 -DMIOPEN_USE_FPMIX=0" ;;
    mixed)
        case $k in
        MIOpenBatchNormActiv*) defs="-DMIOPEN_USE_FP16=1 -DMIOPEN_USE_FP32=0 -DMIOPEN_USE_FPMIX=1" ;;
        *) defs="-DMIOPEN_USE_FP16=0 -DMIOPEN_USE_FP32=0 -DMIOPEN_USE_FPMIX=1" ;;
        esac
        ;;
    esac
    [ "$v" = - ] || defs="$defs -DMIO_BN_VARIANT=$v"
    defs="$defs $(shape "$v")"
    # The solvers' rule: MIO_BN_GFXnnnX is 1 when the device name starts with gfxnnn.
    for f in $flags; do
        local series=${f#MIO_BN_GFX}
        series=${series%X}
        if [ "${arch#gfx$series}" != "$arch" ]; then defs="$defs -D$f=1"; else defs="$defs -D$f=0"; fi
    done
    local out err rc
    out=$(mktemp)
    # shellcheck disable=SC2086
    err=$(cd "$dir/src/kernels" && "${CLANG:-clang-21}" $clflags -mcpu="$arch" $common $defs -c "$k" -o "$out" 2>&1)
    rc=$?
    rm -f "$out"
    local first
    first=$(printf '%s\n' "$err" | grep -m1 'error:' | sed 's/^[^ ]*: error: //' | tr '\t' ' ')
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$k" "$v" "$prec" "$arch" "$tree" "$rc" "$first"
}
# The compiles to run, one per line of $F/jobs.txt.
bn_jobs() {
    kernels=$(cd "$PATCHED/src/kernels" && grep -l 'batchnorm_functions.h\|reduction_functions.h\|MIOPEN_USE_AMDGCN' MIOpenBatchNorm*.cl | sort)
    jobs=$F/jobs.txt
    : >"$jobs"
    for k in $kernels; do
        variants=$(grep -o 'MIO_BN_VARIANT *== *[0-9]*' "$PATCHED/src/kernels/$k" | grep -o '[0-9]*$' | sort -un)
        [ -n "$variants" ] || variants=-
        for v in $variants; do
            for prec in fp32 mixed; do
                for arch in gfx1010 gfx1011 gfx1012 gfx1030; do
                    for tree in pristine patched; do
                        echo "$k $v $prec $arch $tree" >>"$jobs"
                    done
                done
            done
        done
    done
}

bn_kernels() {
    bn_jobs
    export -f compile_one shape
    export F PRISTINE PATCHED flags_pristine flags_patched common clflags
    local t
    t=$(now)
    xargs -P 2 -L 1 bash -c 'compile_one "$@"' _ <"$jobs" >"$R/kernels.tsv"
    step kernels 0 "$(since "$t")" "$(wc -l <"$jobs") compiles"
}
