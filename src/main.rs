fn main() -> std::process::ExitCode {
    rdna1_patch::cli::main()
}
