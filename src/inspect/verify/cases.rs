//! The battery's cases, as smoke.py reads them, and the tolerances their
//! results are judged by.

use serde::Serialize;

/// One case as smoke.py reads it.
#[derive(Debug, Clone, Serialize)]
pub struct Case {
    pub name: String,
    #[serde(skip)]
    pub library: &'static str,
    pub op: &'static str,
    pub dtype: &'static str,
    pub layout: &'static str,
    /// NCHW for convolution and batch norm, (m, k, n) for matmul and
    /// linear, (batch, sequence, input, hidden) for the RNNs, (batch, heads,
    /// sequence, dim) for attention, the input's shape for the rest (with
    /// the bins of scatter-add and the k of topk last).
    pub shape: Vec<usize>,
    pub out: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub groups: usize,
}

/// The largest error allowed, over the largest magnitude of the CPU
/// result: a wrong kernel is off by O(1); these leave room for fp32's
/// Winograd and for half's 11-bit mantissa over reductions of thousands.
pub const TOLERANCES: [(&str, f64); 3] = [("fp32", 1e-3), ("fp16", 1e-2), ("int64", 0.0)];

pub fn tolerance(dtype: &str) -> f64 {
    TOLERANCES
        .iter()
        .find(|(d, _)| *d == dtype)
        .map_or(0.0, |t| t.1)
}

/// Every case, MIOpen's first. Batch norm runs at H*W 256 and 1600: MIOpen's
/// spatial kernels take variant 0 at H*W <= 512 and variant 1 above 1024,
/// forward and backward (forward_spatial_single.cpp,
/// backward_spatial_single.cpp); N is 4, past its workaround for N < 3.
pub fn cases() -> Vec<Case> {
    let base = Case {
        name: String::new(),
        library: "MIOpen",
        op: "conv",
        dtype: "fp32",
        layout: "nchw",
        shape: Vec::new(),
        out: 0,
        kernel: 1,
        stride: 1,
        padding: 0,
        groups: 1,
    };
    // Name, NCHW, then out channels, kernel, stride, padding, groups.
    type Conv = (&'static str, [usize; 4], [usize; 5]);
    let convs: [Conv; 4] = [
        ("conv3x3", [2, 8, 24, 24], [16, 3, 1, 1, 1]),
        ("conv1x1", [2, 16, 16, 16], [32, 1, 1, 0, 1]),
        ("conv3x3s2", [2, 8, 32, 32], [16, 3, 2, 1, 1]),
        ("convdw3x3", [2, 16, 24, 24], [16, 3, 1, 1, 16]),
    ];
    let kinds = [
        ("fp32", "nchw"),
        ("fp32", "nhwc"),
        ("fp16", "nchw"),
        ("fp16", "nhwc"),
    ];
    let mut out = Vec::new();
    for (name, shape, [o, k, s, p, g]) in convs {
        for (dtype, layout) in kinds {
            out.push(Case {
                name: format!("{name}-{dtype}-{layout}"),
                dtype,
                layout,
                shape: shape.to_vec(),
                out: o,
                kernel: k,
                stride: s,
                padding: p,
                groups: g,
                ..base.clone()
            });
        }
    }
    for op in ["bn-train", "bn-eval"] {
        for (size, shape) in [("16x16", [4, 8, 16, 16]), ("40x40", [4, 4, 40, 40])] {
            for (dtype, layout) in kinds {
                out.push(Case {
                    name: format!("{op}-{size}-{dtype}-{layout}"),
                    op,
                    dtype,
                    layout,
                    shape: shape.to_vec(),
                    ..base.clone()
                });
            }
        }
    }
    out.extend(rnns_and_transposed(&base));
    out.extend(outside_miopen(&base));
    out
}

/// MIOpen's RNNs (torch's LSTM and GRU on ROCm) and a transposed
// convolution, forward and backward: (batch, sequence, input, hidden)
/// and NCHW with out channels, kernel, stride, padding.
fn rnns_and_transposed(base: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    for (name, op, shape, [o, k, st, p]) in [
        ("lstm-fp32", "lstm", [4, 12, 16, 32], [0, 1, 1, 0]),
        ("gru-fp32", "gru", [4, 12, 16, 32], [0, 1, 1, 0]),
        (
            "conv-transpose2d-fp32",
            "conv-transpose2d",
            [2, 8, 16, 16],
            [4, 3, 2, 1],
        ),
    ] {
        out.push(Case {
            name: name.to_owned(),
            op,
            shape: shape.to_vec(),
            out: o,
            kernel: k,
            stride: st,
            padding: p,
            ..base.clone()
        });
    }
    out
}

/// Outside MIOpen: rocBLAS's GEMMs, then the ops that fail on gfx101x
/// (issue 52): torch's own kernels (hipcub's scans and sorts), and
/// attention without aotriton's kernels (the math path).
fn outside_miopen(base: &Case) -> Vec<Case> {
    type Other = (
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static [usize],
    );
    let others: [Other; 12] = [
        ("matmul-fp32", "rocBLAS", "matmul", "fp32", &[64, 96, 80]),
        ("matmul-fp16", "rocBLAS", "matmul", "fp16", &[64, 96, 80]),
        ("linear-fp16", "rocBLAS", "linear", "fp16", &[64, 96, 80]),
        ("nonzero", "hipcub", "nonzero", "int64", &[4096]),
        ("masked-select", "hipcub", "masked-select", "fp32", &[4096]),
        ("bool-index", "hipcub", "bool-index", "fp32", &[64, 16]),
        ("unique", "hipcub", "unique", "int64", &[4096]),
        ("sort-topk", "hipcub", "sort-topk", "fp32", &[4096, 10]),
        ("scatter-add", "torch", "scatter-add", "fp32", &[4096, 64]),
        ("repr", "torch", "repr", "fp32", &[4, 5]),
        ("sdpa", "torch", "sdpa", "fp32", &[2, 4, 64, 32]),
        (
            "sdpa-causal",
            "torch",
            "sdpa-causal",
            "fp32",
            &[2, 4, 64, 32],
        ),
    ];
    others
        .into_iter()
        .map(|(name, library, op, dtype, shape)| Case {
            name: name.to_owned(),
            library,
            op,
            dtype,
            shape: shape.to_vec(),
            ..base.clone()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_battery_has_every_kind_once() {
        let all = cases();
        assert_eq!(all.len(), 47);
        let mut names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), 47, "names are unique");
        assert_eq!(all.iter().filter(|c| c.library == "MIOpen").count(), 35);
    }
}
