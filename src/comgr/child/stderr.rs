//! The compile child's stderr, kept per compile, so that the assembler's
//! own words (the operand it rejects) reach the verdict, and a compiler
//! that dies still has its last words said.

/// The compile child's stderr, kept per compile: a temp file (a memfd)
/// stands as descriptor 2 while a compiler runs, and is read back after.
/// Should the compiler die of a signal meanwhile, a handler writes what it
/// kept to the real stderr first, so that its last words (an LLVM abort's
/// message) still reach the parent.
pub struct KeptStderr {
    file: std::fs::File,
    real: std::os::fd::OwnedFd,
}

/// The kept file and the real stderr, for the signal handler: -1 when no
/// compile runs.
static KEPT_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);
static REAL_FD: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// The most of a compile's stderr kept.
const STDERR_CAP: u64 = 64 << 10;

/// The most the compile child writes to any one file (RLIMIT_FSIZE): its
/// kept stderr is a memfd, and a compile's own temp files are a few MB.
const FILE_CAP: libc::rlim_t = 1 << 30;

/// One compile's stretch of [`KeptStderr`]: descriptor 2 is the kept file
/// until [`Keeping::finish`].
pub struct Keeping<'a>(&'a KeptStderr);

impl KeptStderr {
    /// A memfd for the compiles' stderr, and the real one kept aside
    /// (close-on-exec both), with the handlers that give a dying compile's
    /// words back; None where the system has no memfd.
    pub fn new() -> Option<KeptStderr> {
        use std::os::fd::{FromRawFd, OwnedFd};
        // SAFETY: plain descriptor calls on descriptors this process owns;
        // each new one is owned by exactly one value.
        let (file, real) = unsafe {
            let fd = libc::memfd_create(c"rdna1-patch-stderr".as_ptr(), libc::MFD_CLOEXEC);
            if fd < 0 {
                return None;
            }
            let file = std::fs::File::from_raw_fd(fd);
            let real = libc::fcntl(2, libc::F_DUPFD_CLOEXEC, 3);
            if real < 0 {
                return None;
            }
            (file, OwnedFd::from_raw_fd(real))
        };
        install_handlers();
        // The kept stderr is memory: a compiler that writes without end
        // is stopped (SIGXFSZ, a death the parent reports, never a
        // verdict) at FILE_CAP, far above any file a compile writes.
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: an out-pointer and an in-pointer to a local rlimit.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_FSIZE, &raw mut limit) == 0 && limit.rlim_cur > FILE_CAP
            {
                limit.rlim_cur = FILE_CAP;
                libc::setrlimit(libc::RLIMIT_FSIZE, &raw const limit);
            }
        }
        Some(KeptStderr { file, real })
    }

    pub(super) fn start(&self) -> Keeping<'_> {
        use std::os::fd::AsRawFd;
        let _ = self.file.set_len(0);
        // SAFETY: descriptor calls on descriptors `self` owns; 2 is this
        // process's own stderr, given back in `finish`.
        unsafe {
            libc::lseek(self.file.as_raw_fd(), 0, libc::SEEK_SET);
            REAL_FD.store(self.real.as_raw_fd(), std::sync::atomic::Ordering::SeqCst);
            KEPT_FD.store(self.file.as_raw_fd(), std::sync::atomic::Ordering::SeqCst);
            libc::dup2(self.file.as_raw_fd(), 2);
        }
        Keeping(self)
    }
}

impl Keeping<'_> {
    /// The real stderr back as descriptor 2; what the compile wrote there.
    pub(super) fn finish(self) -> String {
        use std::io::{Read, Seek};
        use std::os::fd::AsRawFd;
        let k = self.0;
        // SAFETY: as in `start`.
        unsafe {
            libc::dup2(k.real.as_raw_fd(), 2);
        }
        KEPT_FD.store(-1, std::sync::atomic::Ordering::SeqCst);
        let mut said = Vec::new();
        let mut file = &k.file;
        if file.seek(std::io::SeekFrom::Start(0)).is_ok() {
            let _ = file.take(STDERR_CAP).read_to_end(&mut said);
        }
        String::from_utf8_lossy(&said).into_owned()
    }
}

/// On a signal that ends the child (an abort, a crash), the kept stderr
/// written to the real one, then the signal's own end.
fn install_handlers() {
    extern "C" fn give_back(sig: libc::c_int) {
        let kept = KEPT_FD.load(std::sync::atomic::Ordering::SeqCst);
        let real = REAL_FD.load(std::sync::atomic::Ordering::SeqCst);
        // SAFETY: only async-signal-safe calls (lseek, read, write, dup2,
        // signal, raise) on plain descriptors and a stack buffer.
        unsafe {
            if kept >= 0 && real >= 0 {
                libc::lseek(kept, 0, libc::SEEK_SET);
                let mut buf = [0u8; 4096];
                loop {
                    let n = libc::read(kept, buf.as_mut_ptr().cast(), buf.len());
                    if n <= 0 {
                        break;
                    }
                    let _ = libc::write(real, buf.as_ptr().cast(), n as usize);
                }
                libc::dup2(real, 2);
            }
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
    }
    for sig in [
        libc::SIGABRT,
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
    ] {
        // SAFETY: a handler that calls only async-signal-safe functions,
        // installed before any compiler is loaded.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = give_back as extern "C" fn(libc::c_int) as usize;
            act.sa_flags = libc::SA_RESETHAND | libc::SA_NODEFER;
            libc::sigemptyset(&raw mut act.sa_mask);
            libc::sigaction(sig, &raw const act, std::ptr::null_mut());
        }
    }
}
