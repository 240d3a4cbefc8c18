"""Make the bn-gfx101x series' change to MIOpen kernel texts as a release
embeds them, with every header inlined. Run by fidelity-release.sh:

    apply_release.py SERIES_PATCH KERNELS_DIR

The series inserts one block in two kinds of place: before a kernel's own
`#define MIOPEN_USE_AMDGCN 0` (its .cl hunks: context `` and that line),
and in batchnorm_functions.h between its comment
`// MIOPEN_USE_AMDGCN may be defined before this header.` and
`#ifndef MIOPEN_USE_AMDGCN`. In a release text the header is inlined into
each kernel, so each kernel gets the header's insertion at that comment,
and the five that decide for themselves get the kernel's at their first
`#define MIOPEN_USE_AMDGCN 0`. The blocks are read from the patch, so what
is compiled is what the series adds. Prints what was done to each file.
"""
import sys
from pathlib import Path

patch, kernels = Path(sys.argv[1]).read_text(), Path(sys.argv[2])
hunks = {}
current = None
for line in patch.splitlines():
    if line.startswith("+++ b/"):
        current = line[len("+++ b/"):]
        hunks[current] = []
    elif current and line.startswith("+") and not line.startswith("+++"):
        hunks[current].append(line[1:])
header_block = hunks.pop("src/kernels/batchnorm_functions.h")
own = {Path(f).name: block for f, block in hunks.items()}
assert own and all(b == header_block for b in own.values()), "the series' blocks differ"

ANCHOR_OWN = "#define MIOPEN_USE_AMDGCN 0"
ANCHOR_HDR = "// MIOPEN_USE_AMDGCN may be defined before this header."
for path in sorted(kernels.glob("MIOpenBatchNorm*.cl")):
    lines = path.read_text().split("\n")
    done = []
    if path.name in own:
        at = lines.index(ANCHOR_OWN)
        if lines[at - 1] != "":
            sys.exit(f"{path.name}: the line before `{ANCHOR_OWN}` is not blank, as the patch's context says")
        lines[at:at] = own[path.name]
        done.append(f"kernel block at line {at + 1}")
    hdr = [i for i, l in enumerate(lines) if l == ANCHOR_HDR]
    if len(hdr) != 1 or lines[hdr[0] + 1] != "#ifndef MIOPEN_USE_AMDGCN":
        sys.exit(f"{path.name}: the inlined batchnorm_functions.h is not as the patch's context says")
    lines[hdr[0] + 1:hdr[0] + 1] = header_block
    done.append(f"header block at line {hdr[0] + 2}")
    path.write_text("\n".join(lines))
    print(f"{path.name}: {', '.join(done)};")
