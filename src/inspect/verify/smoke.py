# verify --smoke: one case of the battery, or with "info" what torch and the
# device are, in a child of its own so that a hang or a crash is that case's
# alone. argv: info DEVICE | case DEVICE NAME SPEC, where DEVICE is "cuda"
# (torch's name for a ROCm GPU) or "cpu" (the tests' hook), and SPEC the
# case as JSON. Prints one JSON line; the errors it measures are judged by
# the caller, which owns the tolerances.
import json
import sys
import time
import traceback

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}
# The libraries that carry GPU code, as their files are named.
LIBRARIES = (
    "libMIOpen", "libamdhip64", "libtorch_hip", "librocblas", "libhipblas", "libhipblaslt", "librocsolver",
    "libhipsolver", "librocsparse", "libhipsparse", "librocrand", "libhiprand", "librocfft", "libhipfft",
    "libaotriton", "librccl", "libhsa-runtime64", "libamd_comgr", "libhiprtc",
)


def info(device):
    out = {"torch": torch.__version__, "hip": getattr(torch.version, "hip", None)}
    if device == "cuda":
        if not torch.cuda.is_available():
            sys.exit("torch.cuda.is_available() is False: torch sees no GPU")
        props = torch.cuda.get_device_properties(0)
        out["name"] = props.name
        out["arch"] = getattr(props, "gcnArchName", None)
    else:
        out["name"] = "cpu"
        out["arch"] = None
    out["maps"] = gpu_libraries()
    return out


def randn(*shape):
    return torch.randn(*shape, dtype=torch.float64)


def rounded(t, dtype):
    """t as the device gets it: the reference starts from the same values."""
    return t.to(dtype=dtype).to(dtype=torch.float64)


def place(t, device, dtype, layout="nchw"):
    fmt = torch.channels_last if layout == "nhwc" else torch.contiguous_format
    if t.dim() != 4:
        fmt = torch.contiguous_format
    return t.to(device=device, dtype=dtype).contiguous(memory_format=fmt)


def conv(spec, dtype):
    n, c, h, w = spec["shape"]
    k, s, p, g, o = spec["kernel"], spec["stride"], spec["padding"], spec["groups"], spec["out"]
    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    x, wt, b, dy = (rounded(t, dtype) for t in (randn(n, c, h, w), randn(o, c // g, k, k), randn(o), randn(n, o, ho, wo)))

    def run(device, dt):
        xd = place(x, device, dt, spec["layout"]).requires_grad_()
        wd = place(wt, device, dt, spec["layout"]).requires_grad_()
        bd = place(b, device, dt).requires_grad_()
        y = F.conv2d(xd, wd, bd, stride=s, padding=p, groups=g)
        gx, gw, gb = torch.autograd.grad(y, (xd, wd, bd), place(dy, device, dt, spec["layout"]))
        return {"y": y, "grad_input": gx, "grad_weight": gw, "grad_bias": gb}

    return run


def batch_norm(spec, dtype):
    """fp16 as autocast runs it: half data, float weights and statistics
    (MIOpen's mixed variant, the one its solvers take for half)."""
    n, c, h, w = spec["shape"]
    train = spec["op"] == "bn-train"
    x = rounded(randn(n, c, h, w) * 2 + 0.5, dtype)
    dy = rounded(randn(n, c, h, w), dtype)
    weight, bias = 1 + 0.1 * randn(c), 0.1 * randn(c)
    mean, var = (torch.zeros(c, dtype=torch.float64), torch.ones(c, dtype=torch.float64)) if train else (0.5 * randn(c), randn(c).abs() + 0.5)
    weight, bias, mean, var = (rounded(t, torch.float32) for t in (weight, bias, mean, var))

    def run(device, dt):
        pt = torch.float32 if dt != torch.float64 else dt
        xd = place(x, device, dt, spec["layout"]).requires_grad_(train)
        wd, bd = (place(t, device, pt).requires_grad_(train) for t in (weight, bias))
        md, vd = place(mean, device, pt), place(var, device, pt)
        y = F.batch_norm(xd, md, vd, wd, bd, training=train, momentum=0.1, eps=1e-5)
        if not train:
            return {"y": y}
        gx, gw, gb = torch.autograd.grad(y, (xd, wd, bd), place(dy, device, dt, spec["layout"]))
        return {"y": y, "running_mean": md, "running_var": vd, "grad_input": gx, "grad_weight": gw, "grad_bias": gb}

    return run


def matmul(spec, dtype):
    m, k, n = spec["shape"]
    a, b = rounded(randn(m, k), dtype), rounded(randn(k, n), dtype)
    return lambda device, dt: {"y": torch.matmul(place(a, device, dt), place(b, device, dt))}


def integers(n, high):
    return torch.randint(0, high, (n,), dtype=torch.int64)


def nonzero(spec, dtype):
    t = integers(spec["shape"][0], 7)
    return lambda device, dt: {"nonzero": torch.nonzero(t.to(device=device) > 3)}


def masked_select(spec, dtype):
    x = rounded(randn(spec["shape"][0]), dtype)

    def run(device, dt):
        xd = place(x, device, dt)
        return {"y": torch.masked_select(xd, xd > 0)}

    return run


def bool_index(spec, dtype):
    """Boolean-mask indexing, and assignment through the same mask."""
    x = rounded(randn(*spec["shape"]), dtype)

    def run(device, dt):
        xd = place(x, device, dt)
        mask = xd > 0
        assigned = xd.clone()
        assigned[mask] = 0.5
        return {"selected": xd[mask], "assigned": assigned}

    return run


def unique(spec, dtype):
    t = integers(spec["shape"][0], 7)

    def run(device, dt):
        values, inverse, counts = torch.unique(t.to(device=device), sorted=True, return_inverse=True, return_counts=True)
        return {"values": values, "inverse": inverse, "counts": counts}

    return run


def sort_topk(spec, dtype):
    n, k = spec["shape"]
    x = rounded(randn(n), dtype)

    def run(device, dt):
        xd = place(x, device, dt)
        values, indices = torch.sort(xd)
        top, top_indices = torch.topk(xd, k)
        return {"sorted": values, "sort_indices": indices, "topk": top, "topk_indices": top_indices}

    return run


def scatter_add(spec, dtype):
    n, bins = spec["shape"]
    src, index = rounded(randn(n), dtype), integers(n, bins)

    def run(device, dt):
        out = torch.zeros(bins, dtype=dt, device=device)
        return {"y": out.scatter_add(0, index.to(device=device), place(src, device, dt))}

    return run


def text(spec, dtype):
    """repr of a tensor on the device, as the CPU prints the same values
    (printing copies to the host: what fails there fails here)."""
    x = rounded(randn(*spec["shape"]), dtype)

    def run(device, dt):
        shown = repr(place(x, device, torch.float32))
        return {"repr": shown.replace(", device='cuda:0'", "")}

    return run


def rnn(spec, dtype):
    """nn.LSTM or nn.GRU, forward and backward, from the same weights."""
    batch, seq, size, hidden = spec["shape"]
    kind = torch.nn.LSTM if spec["op"] == "lstm" else torch.nn.GRU
    weights = {k: rounded(v.detach().to(dtype=torch.float64), dtype) for k, v in kind(size, hidden, batch_first=True).state_dict().items()}
    x, dy = rounded(randn(batch, seq, size), dtype), rounded(randn(batch, seq, hidden), dtype)

    def run(device, dt):
        m = kind(size, hidden, batch_first=True).to(device=device, dtype=dt)
        m.load_state_dict({k: place(v, device, dt) for k, v in weights.items()})
        xd = place(x, device, dt).requires_grad_()
        y, state = m(xd)
        h = state[0] if isinstance(state, tuple) else state
        names = [k for k, _ in m.named_parameters()]
        grads = torch.autograd.grad(y, [xd] + [p for _, p in m.named_parameters()], place(dy, device, dt))
        out = {"y": y, "h": h, "grad_input": grads[0]}
        out.update(("grad_" + k, g) for k, g in zip(names, grads[1:]))
        return out

    return run


def attention(spec, dtype):
    """scaled_dot_product_attention, forward and backward; causal or not."""
    q, k, v, dy = (rounded(randn(*spec["shape"]), dtype) for _ in range(4))
    causal = spec["op"] == "sdpa-causal"

    def run(device, dt):
        qd, kd, vd = (place(t, device, dt).requires_grad_() for t in (q, k, v))
        y = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)
        gq, gk, gv = torch.autograd.grad(y, (qd, kd, vd), place(dy, device, dt))
        return {"y": y, "grad_q": gq, "grad_k": gk, "grad_v": gv}

    return run


def conv_transpose(spec, dtype):
    n, c, h, w = spec["shape"]
    o, k, s, p = spec["out"], spec["kernel"], spec["stride"], spec["padding"]
    ho, wo = (h - 1) * s - 2 * p + k + 1, (w - 1) * s - 2 * p + k + 1
    x, wt, b, dy = (rounded(t, dtype) for t in (randn(n, c, h, w), randn(c, o, k, k), randn(o), randn(n, o, ho, wo)))

    def run(device, dt):
        xd, wd, bd = (place(t, device, dt).requires_grad_() for t in (x, wt, b))
        y = F.conv_transpose2d(xd, wd, bd, stride=s, padding=p, output_padding=1)
        gx, gw, gb = torch.autograd.grad(y, (xd, wd, bd), place(dy, device, dt))
        return {"y": y, "grad_input": gx, "grad_weight": gw, "grad_bias": gb}

    return run


def linear(spec, dtype):
    m, k, n = spec["shape"]
    x, wt, b, dy = (rounded(t, dtype) for t in (randn(m, k), randn(n, k), randn(n), randn(m, n)))

    def run(device, dt):
        xd, wd, bd = (place(t, device, dt).requires_grad_() for t in (x, wt, b))
        y = F.linear(xd, wd, bd)
        gx, gw, gb = torch.autograd.grad(y, (xd, wd, bd), place(dy, device, dt))
        return {"y": y, "grad_input": gx, "grad_weight": gw, "grad_bias": gb}

    return run


OPS = {
    "conv": conv, "bn-train": batch_norm, "bn-eval": batch_norm, "matmul": matmul, "linear": linear,
    "lstm": rnn, "gru": rnn, "conv-transpose2d": conv_transpose, "nonzero": nonzero,
    "masked-select": masked_select, "bool-index": bool_index, "unique": unique, "sort-topk": sort_topk,
    "scatter-add": scatter_add, "repr": text, "sdpa": attention, "sdpa-causal": attention,
}


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


EXACT = (torch.int64, torch.bool)


def compare(got, ref):
    """Per output: the largest error against the float64 CPU result, and
    the largest magnitude of that result (the scale the error is read on);
    integers, indices and text exactly."""
    out = []
    for name, r in ref.items():
        g = got[name]
        if isinstance(r, str):
            entry = {"name": name, "abs": 0.0, "scale": 1.0, "exact": True}
            if g != r:
                entry["abs"] = None
                entry["note"] = "the text %r, the CPU's %r" % (g[:60], r[:60])
            out.append(entry)
            continue
        exact = r.dtype in EXACT
        r = r.detach().to(dtype=torch.float64)
        g = g.detach().to(device="cpu", dtype=torch.float64)
        entry = {"name": name, "abs": None, "scale": r.abs().max().item() if r.numel() else 0.0, "exact": exact}
        if tuple(g.shape) != tuple(r.shape):
            entry["note"] = "shape %s, the CPU's %s" % (tuple(g.shape), tuple(r.shape))
        elif not bool(torch.isfinite(g).all()):
            entry["note"] = "NaN or Inf in the result"
        else:
            entry["abs"] = (g - r).abs().max().item() if r.numel() else 0.0
        out.append(entry)
    return out


def gpu_libraries():
    """The GPU libraries the process mapped: what a failure came from."""
    libs = set()
    for line in open("/proc/self/maps"):
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].strip().rsplit("/", 1)[-1].startswith(LIBRARIES):
            libs.add(parts[5].strip())
    return sorted(libs)


def case(device, spec):
    torch.manual_seed(0)
    dtype = DTYPES.get(spec["dtype"], torch.float32)
    run = OPS[spec["op"]](spec, dtype)
    seconds, runs = [], []
    # The first run compiles what MIOpen has not cached; the second reuses it.
    for _ in range(2):
        start = time.perf_counter()
        runs.append(run(device, dtype))
        sync(device)
        seconds.append(time.perf_counter() - start)
    ref = run("cpu", torch.float64)
    worst = {}
    for got in runs:
        for e in compare(got, ref):
            prev = worst.get(e["name"])
            if prev is None or prev["abs"] is not None and (e["abs"] is None or e["abs"] > prev["abs"]):
                worst[e["name"]] = e
    return {"outputs": list(worst.values()), "seconds": seconds}


def main():
    mode, device = sys.argv[1], sys.argv[2]
    if mode == "info":
        print(json.dumps(info(device)))
    else:
        try:
            answer = case(device, json.loads(sys.argv[4]))
        except Exception:
            # The error, then what was mapped: the caller names the library
            # that has no code for the chip from either.
            traceback.print_exc()
            sys.stderr.write("rdna1-patch smoke maps: %s\n" % json.dumps(gpu_libraries()))
            sys.exit(1)
        print(json.dumps(answer))


main()
