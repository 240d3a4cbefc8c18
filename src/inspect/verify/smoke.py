# verify --smoke: one case of the battery, or with "info" what torch and the
# device are, in a child of its own so that a hang or a crash is that case's
# alone. argv: info DEVICE | case DEVICE NAME SPEC, where DEVICE is "cuda"
# (torch's name for a ROCm GPU) or "cpu" (the tests' hook), and SPEC the
# case as JSON. Prints one JSON line; the errors it measures are judged by
# the caller, which owns the tolerances.
import json
import sys
import time

import torch
import torch.nn.functional as F

DTYPES = {"fp32": torch.float32, "fp16": torch.float16}


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
    libs = set()
    for line in open("/proc/self/maps"):
        parts = line.split(None, 5)
        if len(parts) == 6 and ("libMIOpen" in parts[5] or "libamdhip64" in parts[5]):
            libs.add(parts[5].strip())
    out["maps"] = sorted(libs)
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


def nonzero_unique(spec, dtype):
    t = torch.randint(0, 7, (spec["shape"][0],), dtype=torch.int64)

    def run(device, dt):
        td = t.to(device=device)
        values, counts = torch.unique(td, return_counts=True)
        return {"nonzero": torch.nonzero(td > 3), "unique": values, "counts": counts}

    return run


OPS = {"conv": conv, "bn-train": batch_norm, "bn-eval": batch_norm, "matmul": matmul, "nonzero-unique": nonzero_unique}


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def compare(got, ref):
    """Per output: the largest error against the float64 CPU result, and
    the largest magnitude of that result (the scale the error is read on)."""
    out = []
    for name, r in ref.items():
        r = r.detach().to(dtype=torch.float64)
        g = got[name].detach().to(device="cpu", dtype=torch.float64)
        entry = {"name": name, "abs": None, "scale": r.abs().max().item() if r.numel() else 0.0}
        if tuple(g.shape) != tuple(r.shape):
            entry["note"] = "shape %s, the CPU's %s" % (tuple(g.shape), tuple(r.shape))
        elif not bool(torch.isfinite(g).all()):
            entry["note"] = "NaN or Inf in the result"
        else:
            entry["abs"] = (g - r).abs().max().item() if r.numel() else 0.0
        out.append(entry)
    return out


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
        print(json.dumps(case(device, json.loads(sys.argv[4]))))


main()
