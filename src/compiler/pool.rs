//! The compile children of a run: one per core, each started at the
//! first compile it takes and kept warm (comgr, and hipRTC once a HIP text
//! needs it, loaded once) until the run ends, each taking the costliest
//! job left from one queue. A child that hangs or dies is stopped, its
//! job answered with the error, and the next job its thread takes starts
//! another.

use std::collections::BinaryHeap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::comgr::child::{self, Answer, Warm};

/// What a child is started with.
#[derive(Clone)]
pub(super) struct Spawn {
    pub exe: PathBuf,
    pub comgr: PathBuf,
    pub hiprtc: Option<PathBuf>,
    pub limit: Duration,
}

/// One compile for a child: its text (sent to a child once, by `id`),
/// the job, and where its answer goes.
pub(super) struct Task {
    pub cost: usize,
    pub id: usize,
    pub source: Arc<child::Source>,
    pub job: child::Job,
    /// "NAME for TARGET", for an error.
    pub at: String,
    /// The asker's number for it.
    pub index: usize,
    pub reply: Sender<Reply>,
    /// Set once the asker has an error: the task is answered unrun.
    pub cancelled: Arc<AtomicBool>,
    seq: usize,
}

/// The versions of comgr and of hipRTC (when loaded) a child said.
pub(super) type Versions = ((usize, usize), Option<(usize, usize)>);

/// A task's answer, with the versions of the compilers that gave it.
pub(super) struct Reply {
    pub index: usize,
    pub answer: anyhow::Result<Answer>,
    pub versions: Option<Versions>,
}

impl PartialEq for Task {
    fn eq(&self, other: &Task) -> bool {
        self.seq == other.seq
    }
}
impl Eq for Task {}
impl PartialOrd for Task {
    fn partial_cmp(&self, other: &Task) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Task {
    /// The costliest first (a HIP compile is ten OpenCL ones), then the
    /// first asked.
    fn cmp(&self, other: &Task) -> std::cmp::Ordering {
        self.cost.cmp(&other.cost).then(other.seq.cmp(&self.seq))
    }
}

#[derive(Default)]
struct Queue {
    tasks: BinaryHeap<Task>,
    closed: bool,
    seq: usize,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
}

/// The run's children, by the threads that own them.
pub(super) struct Pool {
    spawn: Spawn,
    shared: Arc<Shared>,
    workers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The ids given to texts: each is sent to a child once.
    ids: AtomicUsize,
}

impl Pool {
    pub fn new(spawn: Spawn) -> Pool {
        Pool {
            spawn,
            shared: Arc::new(Shared {
                queue: Mutex::new(Queue::default()),
                ready: Condvar::new(),
            }),
            workers: Mutex::new(Vec::new()),
            ids: AtomicUsize::new(0),
        }
    }

    /// A new id for a text.
    pub fn id(&self) -> usize {
        self.ids.fetch_add(1, Ordering::Relaxed)
    }

    /// Queue `task`; the threads (one per core) start at the first.
    pub fn push(&self, mut task: Task) {
        self.start_workers();
        let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        task.seq = q.seq;
        q.seq += 1;
        q.tasks.push(task);
        drop(q);
        self.shared.ready.notify_one();
    }

    fn start_workers(&self) {
        let mut workers = self.workers.lock().unwrap_or_else(|e| e.into_inner());
        if !workers.is_empty() {
            return;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        for _ in 0..cores {
            let shared = self.shared.clone();
            let spawn = self.spawn.clone();
            workers.push(std::thread::spawn(move || work(&shared, &spawn)));
        }
    }
}

impl Drop for Pool {
    /// The queue closed, each thread ends its child (its stdin closed)
    /// and itself.
    fn drop(&mut self) {
        let mut q = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        q.closed = true;
        drop(q);
        self.shared.ready.notify_all();
        let workers = std::mem::take(&mut *self.workers.lock().unwrap_or_else(|e| e.into_inner()));
        for w in workers {
            let _ = w.join();
        }
    }
}

/// One thread's loop: take the costliest task, answer it through this
/// thread's child (started, or started again with a hipRTC, as the task
/// needs), until the queue closes.
fn work(shared: &Shared, spawn: &Spawn) {
    let mut warm: Option<Warm> = None;
    loop {
        let task = {
            let mut q = shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(t) = q.tasks.pop() {
                    break t;
                }
                if q.closed {
                    return;
                }
                q = shared.ready.wait(q).unwrap_or_else(|e| e.into_inner());
            }
        };
        // Answered whatever happens below: an error if this thread
        // unwinds, so that no asker waits for an answer never sent.
        let mut reply = Replying {
            to: Some(task.reply.clone()),
            index: task.index,
        };
        if task.cancelled.load(Ordering::SeqCst) {
            reply.send(Ok(Answer::Skipped), None);
            continue;
        }
        // A Ctrl-C that came while this thread had no compile running
        // reached no child of its: nothing more is started.
        if let Some(sig) = crate::interrupt::interrupted() {
            reply.send(Err(crate::interrupt::stopped("rdna1-patch", sig)), None);
            continue;
        }
        // hipRTC is loaded only for HIP texts: a torch whose MIOpen has
        // none may carry a hipRTC that does not load here.
        let hip = task.source.lang == crate::compile::Lang::Hip;
        if hip && warm.as_ref().is_some_and(|w| !w.with_hiprtc) {
            warm = None;
        }
        let started = match warm.take() {
            Some(w) => Ok(w),
            None => Warm::start(
                &spawn.exe,
                &child::Compilers {
                    comgr: spawn.comgr.clone(),
                    hiprtc: spawn.hiprtc.clone().filter(|_| hip),
                },
                spawn.limit,
            ),
        };
        let (answer, versions) = match started {
            Ok(mut w) => {
                let answer = w
                    .send_source(task.id, &task.source)
                    .and_then(|()| w.ask(&task.job, &task.at));
                let versions = Some((w.version, w.hiprtc));
                // A child that failed was stopped: the next task starts
                // another.
                if answer.is_ok() {
                    warm = Some(w);
                }
                (answer, versions)
            }
            Err(e) => (Err(e), None),
        };
        reply.send(answer, versions);
    }
}

/// The one reply a task gets: the one sent, or, if the thread unwinds
/// before, an error.
struct Replying {
    to: Option<Sender<Reply>>,
    index: usize,
}

impl Replying {
    fn send(&mut self, answer: anyhow::Result<Answer>, versions: Option<Versions>) {
        if let Some(to) = self.to.take() {
            let _ = to.send(Reply {
                index: self.index,
                answer,
                versions,
            });
        }
    }
}

impl Drop for Replying {
    fn drop(&mut self) {
        self.send(
            Err(anyhow::anyhow!(
                "a compile thread stopped before it answered"
            )),
            None,
        );
    }
}

impl Task {
    pub fn new(
        (id, source): (usize, Arc<child::Source>),
        mut job: child::Job,
        at: String,
        (index, reply): (usize, Sender<Reply>),
        cancelled: Arc<AtomicBool>,
    ) -> Task {
        job.source = id;
        let cost = match source.lang {
            crate::compile::Lang::Hip => super::HIP_COST,
            crate::compile::Lang::OpenCl => 1,
        };
        Task {
            cost,
            id,
            source,
            job,
            at,
            index,
            reply,
            cancelled,
            seq: 0,
        }
    }
}
