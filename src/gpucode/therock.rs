//! What TheRock (AMD's build of ROCm and of the gfx101x torch wheels)
//! builds for gfx1010, gfx1011 and gfx1012: data, not read from a wheel.
//! Source: ROCm/TheRock, `cmake/therock_amdgpu_targets.cmake` at commit
//! 89553ce3746eda74ade42557470d25e37c91b6f0 (2026-08-22): each of the three
//! targets is declared in the `gfx101X-dgpu` family with the same list of
//! projects left out of its build. Said as what TheRock builds, never as
//! what the user has.

/// The projects TheRock does not build for gfx1010, gfx1011 and gfx1012
/// (each with the TheRock issue the file gives for it).
pub const NOT_BUILT_FOR_GFX101X: &[(&str, u32)] = &[
    ("hipBLASLt", 1062),
    ("hipSPARSELt", 2042),
    ("composable_kernel", 1245),
    ("rocWMMA", 1944),
    ("hipTensor", 2074),
    ("rocprofiler-compute", 2892),
];

/// The file and commit the table is from, for the rows that cite it.
pub const SOURCE: &str = "TheRock's cmake/therock_amdgpu_targets.cmake at 89553ce";

/// The project a library file belongs to, and the torch ops that go
/// through it: what fails when it has no code for the card.
pub fn project(file_name: &str) -> Option<(&'static str, &'static str)> {
    const TABLE: &[(&str, &str, &str)] = &[
        (
            "librocblas.so",
            "rocBLAS",
            "every matmul (mm, bmm, linear, addmm, einsum) and MIOpen's GEMM convolutions fail",
        ),
        (
            "libhipblaslt.so",
            "hipBLASLt",
            "torch falls back to hipBLAS for its GEMMs (\"Attempting to use hipBLASLt on an unsupported architecture! Overriding blas backend to hipblas\")",
        ),
        ("libhipblas.so", "hipBLAS", "matmuls through hipBLAS fail"),
        (
            "libMIOpen.so",
            "MIOpen",
            "convolutions, batch norm, pooling, and nn.LSTM/nn.GRU through MIOpen fail",
        ),
        (
            "librocsolver.so",
            "rocSOLVER",
            "torch.linalg's solvers and factorizations (solve, inv, cholesky, qr, svd, eigh, lstsq) fail",
        ),
        (
            "libhipsolver.so",
            "hipSOLVER",
            "torch.linalg's solvers and factorizations fail",
        ),
        (
            "librocsparse.so",
            "rocSPARSE",
            "sparse tensor ops (torch.sparse.mm, sparse @ dense, to_sparse_csr products) fail",
        ),
        ("libhipsparse.so", "hipSPARSE", "sparse tensor ops fail"),
        (
            "libhipsparselt.so",
            "hipSPARSELt",
            "semi-structured sparsity (to_sparse_semi_structured and its matmuls) fails",
        ),
        ("librocfft.so", "rocFFT", "torch.fft's transforms fail"),
        ("libhipfft.so", "hipFFT", "torch.fft's transforms fail"),
        (
            "librocrand.so",
            "rocRAND",
            "ops that draw their random numbers through rocRAND fail",
        ),
        (
            "libhiprand.so",
            "hipRAND",
            "ops that draw their random numbers through hipRAND fail",
        ),
        (
            "libaotriton",
            "aotriton",
            "scaled_dot_product_attention has no flash or memory-efficient kernel and takes the slow math path",
        ),
        (
            "libck",
            "composable_kernel",
            "torch's composable_kernel GEMM and attention backends fail",
        ),
        ("libhiptensor.so", "hipTensor", "ops through hipTensor fail"),
    ];
    TABLE
        .iter()
        .find(|(prefix, _, _)| file_name.starts_with(prefix))
        .map(|(_, project, ops)| (*project, *ops))
}

/// Whether TheRock builds `project` for gfx101x, by the table above.
pub fn builds_for_gfx101x(project: &str) -> bool {
    !NOT_BUILT_FOR_GFX101X.iter().any(|(p, _)| *p == project)
}

/// Whether torch goes on without the library when it has no code for the
/// card (a warning, not a failure): hipBLASLt (torch uses hipBLAS) and
/// aotriton (attention takes the math path).
pub fn torch_falls_back(project: &str) -> bool {
    matches!(project, "hipBLASLt" | "aotriton")
}
