//! docs/uninstall.md takes away everything the tool and README put on a
//! machine (issue 46: it left the config, whose keys stayed trusted, the
//! man pages, the completion file and the clone's target/).

#[test]
fn the_uninstall_page_names_everything_the_tool_writes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = std::fs::read_to_string(root.join("docs/uninstall.md")).unwrap();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    // The completion file and the man pages where README puts them.
    assert!(readme.contains("~/.local/share/bash-completion/completions/rdna1-patch"));
    assert!(readme.contains("rdna1-patch man --install "));
    for place in [
        "~/.local/share/rdna1-patch",
        "~/.cache/rdna1-patch",
        "~/.local/state/rdna1-patch",
        "~/.config/rdna1-patch",
        "~/.local/share/bash-completion/completions/rdna1-patch",
        "~/.cargo/share/man/man1/rdna1-patch",
        "cargo uninstall rdna1-patch",
        "cargo clean",
    ] {
        assert!(
            page.contains(place),
            "docs/uninstall.md does not name {place}"
        );
    }
}
