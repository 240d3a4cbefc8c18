//! A real OCI registry for the tests: Debian's docker-registry (CNCF
//! distribution) on 127.0.0.1, with its storage in a temp dir. It dies
//! with the process that started it.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Registry {
    child: Child,
    /// host:port
    pub addr: String,
    /// Where the registry keeps blobs (docker/registry/v2/...).
    pub storage: PathBuf,
    _dir: tempfile::TempDir,
}

/// A port nothing listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Registry {
    /// `login`: require this user and password (htpasswd, bcrypt).
    pub fn start(login: Option<(&str, &str)>) -> Registry {
        let dir = tempfile::tempdir().unwrap();
        let storage = dir.path().join("data");
        let auth = match login {
            Some((user, password)) => {
                let file = dir.path().join("htpasswd");
                let hash = Command::new("python3")
                    .args([
                        "-W",
                        "ignore",
                        "-c",
                        "import crypt,sys; print(crypt.crypt(sys.argv[1], crypt.mksalt(crypt.METHOD_BLOWFISH)))",
                        password,
                    ])
                    .output()
                    .unwrap();
                assert!(
                    hash.status.success(),
                    "bcrypt: {}",
                    String::from_utf8_lossy(&hash.stderr)
                );
                let hash = String::from_utf8(hash.stdout).unwrap();
                std::fs::write(&file, format!("{user}:{}\n", hash.trim())).unwrap();
                format!(
                    "auth:\n  htpasswd:\n    realm: test\n    path: {}\n",
                    file.display()
                )
            }
            None => String::new(),
        };
        for _ in 0..5 {
            let port = free_port();
            let addr = format!("127.0.0.1:{port}");
            let config = dir.path().join("config.yml");
            std::fs::write(
                &config,
                format!(
                    "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {addr}\n{auth}",
                    storage.display()
                ),
            )
            .unwrap();
            let mut cmd = Command::new(registry_binary());
            cmd.arg("serve")
                .arg(&config)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            unsafe {
                cmd.pre_exec(|| {
                    libc_prctl_pdeathsig();
                    Ok(())
                });
            }
            let mut child = cmd.spawn().unwrap_or_else(|e| {
                panic!("cannot start docker-registry (apt-get install docker-registry): {e}")
            });
            if wait_up(&addr, &mut child) {
                return Registry {
                    child,
                    addr,
                    storage,
                    _dir: dir,
                };
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("docker-registry did not come up");
    }

    /// The path of a blob in the registry's storage.
    pub fn blob_path(&self, digest: &str) -> PathBuf {
        let hex = digest.strip_prefix("sha256:").unwrap();
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

fn registry_binary() -> &'static Path {
    Path::new("/usr/bin/docker-registry")
}

/// Die with the test process, so no registry outlives a run.
fn libc_prctl_pdeathsig() {
    const PR_SET_PDEATHSIG: i32 = 1;
    unsafe extern "C" {
        fn prctl(option: i32, ...) -> i32;
    }
    unsafe {
        prctl(PR_SET_PDEATHSIG, 9);
    }
}

fn wait_up(addr: &str, child: &mut Child) -> bool {
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if let Ok(Some(_)) = child.try_wait() {
            return false;
        }
        if let Ok(mut s) = TcpStream::connect(addr) {
            let _ = s.write_all(b"GET /v2/ HTTP/1.0\r\n\r\n");
            let mut head = [0u8; 12];
            if s.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.") {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    false
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
