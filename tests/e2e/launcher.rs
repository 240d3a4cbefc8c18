//! Compiler launchers: ccache hits after --clean, distcc through a real
//! daemon on 127.0.0.1, and a launcher asked for but missing.

use std::process::{Command, Stdio};

use crate::support::Sandbox;

/// ccache's own counters for the sandbox's cache dir.
fn ccache_stat(sb: &Sandbox, key: &str) -> u64 {
    let out = Command::new("ccache")
        .arg("--print-stats")
        .env("CCACHE_DIR", sb.root.join("ccache"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{key}\t")))
        .unwrap_or_else(|| panic!("no {key} in ccache --print-stats"))
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn ccache_serves_a_clean_rebuild() {
    let sb = Sandbox::new();
    let run = sb.build(&["--launcher", "ccache"]).ok();
    assert_eq!(run.compiled().len(), 4, "{}", run.stderr);
    assert_eq!(ccache_stat(&sb, "direct_cache_hit"), 0);
    let misses = ccache_stat(&sb, "cache_miss");
    assert_eq!(misses, 4);
    let run = sb.build(&["--launcher", "ccache", "--clean"]).ok();
    assert_eq!(run.compiled().len(), 4, "{}", run.stderr);
    assert_eq!(ccache_stat(&sb, "direct_cache_hit"), 4);
    assert_eq!(ccache_stat(&sb, "cache_miss"), misses);
    let cache = std::fs::read_to_string(sb.work.join("mini/miopen/build/CMakeCache.txt")).unwrap();
    // The ccache on the tool's PATH (the tests' tools dir).
    let ccache = crate::support::tools().join("ccache");
    assert!(
        cache.contains(&format!(
            "CMAKE_CXX_COMPILER_LAUNCHER:UNINITIALIZED={}",
            ccache.display()
        )) || cache.contains(&format!(
            "CMAKE_CXX_COMPILER_LAUNCHER:STRING={}",
            ccache.display()
        )),
        "launcher not in the cache"
    );
}

#[test]
fn a_launcher_asked_for_and_missing_stops_before_configure() {
    let sb = Sandbox::new();
    let run = sb
        .cmd()
        .args(sb.build_args(&["--launcher", "sccache"]))
        .env("PATH", crate::support::tools())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    if crate::support::on_path("sccache") {
        return; // installed here: nothing to refuse
    }
    assert_eq!(run.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("the compiler launcher sccache is not installed"),
        "{stderr}"
    );
    assert!(stderr.contains("--launcher none"), "{stderr}");
    assert!(!sb.work.exists(), "something was fetched or configured");
}

#[test]
fn distcc_sends_compiles_through_a_local_daemon() {
    let sb = Sandbox::new();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let log_path = sb.root.join("distccd.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut daemon = Command::new("distccd")
        .args([
            "--no-detach",
            "--daemon",
            "--allow",
            "127.0.0.1",
            "--listen",
            "127.0.0.1",
        ])
        .args([
            "--port",
            &port.to_string(),
            "--log-stderr",
            "--log-level",
            "info",
        ])
        .stderr(Stdio::from(log))
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start distccd ({e}): this test needs distcc (`apt-get install distcc`, as .ci/run does)")
        });
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            // By its pid: the daemon and the children it forked per job.
            let pid = self.0.id() as i32;
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let _ = self.0.wait();
        }
    }
    let pid = daemon.id();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "distccd never listened"
        );
        assert!(daemon.try_wait().unwrap().is_none(), "distccd exited");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let daemon = Stop(daemon);
    let hosts = format!("127.0.0.1:{port}/3");
    std::fs::create_dir_all(sb.root.join("distcc")).unwrap();
    let out = sb
        .cmd()
        // No --jobs: the default comes from the hosts' slots.
        .args(sb.fx.build_args())
        .args(["--launcher", "distcc", "--dry-run"])
        .env("DISTCC_HOSTS", &hosts)
        .output()
        .unwrap();
    let plan = String::from_utf8_lossy(&out.stdout);
    assert!(
        plan.contains("--parallel 3"),
        "jobs from DISTCC_HOSTS: {plan}"
    );
    // distccd runs only the compilers it lists (/usr/lib/distcc), by the
    // path the client sends: these, not the tools dir's links to them.
    let run = sb
        .cmd()
        .args(sb.build_args(&[
            "--launcher",
            "distcc",
            "-D",
            "CMAKE_CXX_COMPILER=/usr/bin/c++",
            "-D",
            "CMAKE_C_COMPILER=/usr/bin/cc",
        ]))
        .env("DISTCC_HOSTS", &hosts)
        // No silent local fallback: a job that misses the daemon fails.
        .env("DISTCC_FALLBACK", "0")
        .env("DISTCC_SKIP_LOCAL_RETRY", "1")
        .env("DISTCC_DIR", sb.root.join("distcc"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(0), "{stderr}");
    drop(daemon);
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists() || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .unwrap_or_default()
                .contains(") Z ")
        }
    );
    let log = std::fs::read_to_string(&log_path).unwrap();
    let ok = log.matches("COMPILE_OK").count();
    assert_eq!(ok, 4, "distccd's log shows {ok} compiles:\n{log}");
    for unit in [
        "convolution_api.cpp",
        "handlehip.cpp",
        "logger.cpp",
        "tensor.cpp",
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains("COMPILE_OK") && l.contains(unit)),
            "{unit} not compiled by distccd:\n{log}"
        );
    }
}
