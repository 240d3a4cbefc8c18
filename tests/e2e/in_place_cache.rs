//! MIOpen's kernel cache after the in-place fix: the cached batch-norm
//! kernels are forgotten after install and rollback, and a cache that
//! cannot be cleaned is warned about once.

use std::path::Path;

use crate::in_place::{install, torch_with_code};
use crate::support::{Run, Sandbox};

/// A MIOpen user cache with compiled batch-norm and convolution kernels,
/// as MIOpen's kern_db table holds them.
pub(crate) fn kernel_cache(file: &Path) {
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let script = "import sqlite3, sys\n\
        db = sqlite3.connect(sys.argv[1])\n\
        db.execute('CREATE TABLE kern_db (id INTEGER PRIMARY KEY ASC, kernel_name TEXT NOT NULL, kernel_args TEXT NOT NULL, kernel_blob BLOB NOT NULL, kernel_hash TEXT NOT NULL, uncompressed_size INT NOT NULL)')\n\
        for k in ['MIOpenBatchNormFwdTrainSpatial.cl', 'MIOpenBatchNormBwdSpatial.cl', 'MIOpenConvDirUni.cl']:\n    db.execute('INSERT INTO kern_db (kernel_name, kernel_args, kernel_blob, kernel_hash, uncompressed_size) VALUES (?, ?, ?, ?, ?)', (k, '-DMIO_BN_N=32', b'code', 'h', 4))\n\
        db.commit()\n";
    rdna1_testkit::run(
        std::process::Command::new("python3")
            .args(["-c", script])
            .arg(file),
    );
}

fn kernels_in(file: &Path) -> String {
    let out = std::process::Command::new("python3")
        .args([
            "-c",
            "import sqlite3, sys; print(' '.join(r[0] for r in sqlite3.connect(sys.argv[1]).execute('SELECT kernel_name FROM kern_db ORDER BY kernel_name')))",
        ])
        .arg(file)
        .output()
        .unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

#[test]
fn miopens_cached_batch_norm_kernels_are_forgotten_after_install_and_rollback() {
    let sb = Sandbox::new();
    torch_with_code(&sb, &["gfx1010"]);
    let cache = sb.root.join("home/.cache/miopen/3.4.0.abc/gfx1010_18.ukdb");
    let other = sb.root.join("home/.cache/miopen/3.4.0.abc/gfx1030_36.ukdb");
    kernel_cache(&cache);
    kernel_cache(&other);
    install(&sb, &[]).ok().says(&format!(
        "Cache forgot 2 batch-norm kernels MIOpen had compiled, in {} (it compiles them again from the library now in place)",
        cache.display()
    ));
    assert_eq!(
        kernels_in(&cache),
        "MIOpenConvDirUni.cl",
        "convolutions stay"
    );
    assert_eq!(
        kernels_in(&other).split(' ').count(),
        3,
        "gfx1030's cache is not ours"
    );
    // After the rollback, what MIOpen compiled from the fixed texts goes.
    std::fs::remove_file(&cache).unwrap();
    kernel_cache(&cache);
    sb.rollback(&[])
        .ok()
        .says("Cache forgot 2 batch-norm kernels");
    assert_eq!(kernels_in(&cache), "MIOpenConvDirUni.cl");

    // MIOPEN_CUSTOM_CACHE_DIR is the cache dir itself; MIOPEN_DISABLE_CACHE
    // means there is none.
    let custom = sb.root.join("my-cache/gfx1010_18.ukdb");
    kernel_cache(&custom);
    let run = |env: (&str, &str)| {
        let out = sb
            .cmd()
            .env(env.0, env.1)
            .args([
                "install",
                "--into-torch",
                "--profile",
                "rocm-6.4.3",
                "--prefix",
            ])
            .arg(&sb.prefix)
            .arg("--state-dir")
            .arg(sb.root.join("state"))
            .output()
            .unwrap();
        Run::from(out)
    };
    run((
        "MIOPEN_CUSTOM_CACHE_DIR",
        custom.parent().unwrap().to_str().unwrap(),
    ))
    .ok()
    .says(&format!(
        "forgot 2 batch-norm kernels MIOpen had compiled, in {}",
        custom.display()
    ));
    sb.rollback(&[]).ok();
    run(("MIOPEN_DISABLE_CACHE", "1"))
        .ok()
        .says("MIOPEN_DISABLE_CACHE is set: MIOpen keeps no compiled kernels");
}

/// Issue 46, 4: a cache the batch-norm kernels cannot be removed from is
/// a warning, printed once, on install and on rollback alike.
#[test]
fn a_cache_that_cannot_be_cleaned_is_warned_about_once() {
    let sb = Sandbox::new();
    torch_with_code(&sb, &["gfx1010"]);
    let cache = sb.root.join("home/.cache/miopen/3.4.0.abc/gfx1010_18.ukdb");
    std::fs::create_dir_all(cache.parent().unwrap()).unwrap();
    std::fs::write(&cache, "not a database").unwrap();
    let warning = format!(
        "warning: cannot remove the batch-norm kernels from MIOpen's cache {}",
        cache.display()
    );
    for run in [install(&sb, &[]).ok(), sb.rollback(&[]).ok()] {
        run.says(&warning);
        assert_eq!(run.stderr.matches(&warning).count(), 1, "{}", run.stderr);
    }
}
