// The profiles and patch series are compiled in with include_dir!, which
// cannot tell cargo about them: without this an edited patch would not reach
// the binary until some .rs file changed.
fn main() {
    println!("cargo:rerun-if-changed=patches");
    println!("cargo:rerun-if-changed=profiles");
}
