//! Where tenants' own templates are rendered: a few threads of the process's
//! own, at a lower CPU priority than the runtime's workers, taking tenants in
//! turn. A tenant's template may take milliseconds a recipient (bounded:
//! `toki_model::template::RenderBudget`), and a batch has many recipients; on
//! the runtime's workers that would delay every tenant's sends, and on
//! tokio's blocking pool it would compete with them at equal priority. Here
//! the sends always come first, one tenant's jobs run one at a time, and a
//! tenant with a queue of slow jobs waits its turn behind the others' single
//! jobs rather than ahead of them. A tenant's registrations have a lane of
//! their own beside its deliveries' ([`Lane`]): a template checked through
//! the API does not wait for the tenant's batch being planned.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use toki_model::domain::TenantId;

/// How much less CPU a render thread gets than the runtime's workers when
/// both want it (a nice value: 10 gets about a tenth of a nice-0 thread's
/// share on Linux).
const NICENESS: i32 = 10;

type Job = Box<dyn FnOnce() + Send>;

/// What a render is for: each tenant has one job at a time in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// A template checked as it is registered.
    Registration,
    /// A batch of deliveries planned.
    Delivery,
}

/// A tenant's jobs of one purpose: run one at a time, in turn with the others.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lane {
    pub tenant: TenantId,
    pub purpose: Purpose,
}

/// The threads, and the jobs waiting for them, tenant by tenant.
pub struct RenderPool {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<Queue>,
    ready: Condvar,
}

/// Jobs by lane; the lanes with jobs and none running, in turn order.
#[derive(Default)]
struct Queue {
    turns: VecDeque<Lane>,
    jobs: HashMap<Lane, VecDeque<Job>>,
    /// Lanes with a job running now (not in `turns` meanwhile).
    running: std::collections::HashSet<Lane>,
    closed: bool,
}

impl RenderPool {
    /// The process's pool: as many threads as cores (at least two), made at
    /// the first render.
    pub fn global() -> &'static RenderPool {
        static POOL: OnceLock<RenderPool> = OnceLock::new();
        POOL.get_or_init(|| {
            let cores = std::thread::available_parallelism().map_or(2, usize::from);
            RenderPool::new(cores.max(2))
        })
    }

    /// A pool of `threads` render threads.
    pub fn new(threads: usize) -> Self {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            ready: Condvar::new(),
        });
        for i in 0..threads.max(1) {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("toki-render-{i}"))
                .spawn(move || {
                    lower_priority();
                    shared.work();
                })
                .expect("starting a render thread");
        }
        RenderPool { shared }
    }

    /// Runs `job` in `lane` on a render thread, after the lane's earlier
    /// jobs; its result. A panic in the job is one here.
    ///
    /// The answer is awaited on a blocking thread rather than a channel the
    /// runtime polls, so that tokio's paused clock (tests) does not jump
    /// ahead while a render runs, as it would not for `spawn_blocking`.
    pub async fn run<R: Send + 'static>(
        &self,
        lane: Lane,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        self.submit(
            lane,
            Box::new(move || {
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                let _ = tx.send(out);
            }),
        );
        let answer = tokio::task::spawn_blocking(move || rx.recv())
            .await
            .expect("waiting for a render");
        match answer {
            Ok(Ok(out)) => out,
            Ok(Err(panic)) => std::panic::resume_unwind(panic),
            Err(_) => panic!("the render pool dropped a job"),
        }
    }

    fn submit(&self, lane: Lane, job: Job) {
        let mut q = self.shared.lock();
        let jobs = q.jobs.entry(lane.clone()).or_default();
        jobs.push_back(job);
        let queued = jobs.len() == 1;
        if queued && !q.running.contains(&lane) {
            q.turns.push_back(lane);
            self.shared.ready.notify_one();
        }
    }
}

impl Drop for RenderPool {
    /// The threads finish the jobs queued, then end.
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.ready.notify_all();
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A job runs outside the lock: a panic cannot leave it half-written.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A render thread: the next lane's next job, until the pool closes.
    fn work(&self) {
        loop {
            let (lane, job) = {
                let mut q = self.lock();
                loop {
                    if let Some(next) = q.next_job() {
                        break next;
                    }
                    if q.closed {
                        return;
                    }
                    q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                }
            };
            job();
            let mut q = self.lock();
            q.running.remove(&lane);
            if q.jobs.contains_key(&lane) {
                q.turns.push_back(lane);
                self.ready.notify_one();
            }
        }
    }
}

impl Queue {
    /// The job of the lane whose turn it is (marked running).
    fn next_job(&mut self) -> Option<(Lane, Job)> {
        let lane = self.turns.pop_front()?;
        let jobs = self.jobs.get_mut(&lane).expect("a lane in turn has jobs");
        let job = jobs.pop_front().expect("a lane in turn has a job");
        if jobs.is_empty() {
            self.jobs.remove(&lane);
        }
        self.running.insert(lane.clone());
        Some((lane, job))
    }
}

/// This thread at [`NICENESS`] (Linux: a thread's nice value is its own).
/// Where that fails, the thread renders at the usual priority.
fn lower_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on this thread's own id.
        let rc = unsafe {
            let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
            libc::setpriority(libc::PRIO_PROCESS, tid, NICENESS)
        };
        if rc != 0 {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "render thread: could not lower its priority"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `id`'s deliveries' lane.
    fn tenant(id: &str) -> Lane {
        Lane {
            tenant: id.parse().unwrap(),
            purpose: Purpose::Delivery,
        }
    }

    /// One thread: a tenant with three jobs queued first gets one of them
    /// done, then the other tenant's job, then its own again.
    #[tokio::test]
    async fn tenants_take_turns_and_a_tenants_jobs_run_one_at_a_time() {
        let pool = Arc::new(RenderPool::new(1));
        let order = Arc::new(Mutex::new(Vec::new()));
        // Holds the thread until all jobs are queued.
        let (hold, held) = std::sync::mpsc::channel::<()>();
        let first = {
            let pool = pool.clone();
            tokio::spawn(
                async move { pool.run(tenant("gate"), move || held.recv().unwrap()).await },
            )
        };
        let mut jobs = Vec::new();
        for (t, n) in [("slow", 1), ("slow", 2), ("slow", 3), ("other", 1)] {
            let (job_pool, order) = (pool.clone(), order.clone());
            jobs.push(tokio::spawn(async move {
                job_pool
                    .run(tenant(t), move || {
                        order.lock().unwrap().push(format!("{t}{n}"))
                    })
                    .await
            }));
            // Queued in this order.
            while pool
                .shared
                .lock()
                .jobs
                .values()
                .map(VecDeque::len)
                .sum::<usize>()
                < jobs.len()
            {
                tokio::task::yield_now().await;
            }
        }
        hold.send(()).unwrap();
        first.await.unwrap();
        for j in jobs {
            j.await.unwrap();
        }
        assert_eq!(
            *order.lock().unwrap(),
            ["slow1", "other1", "slow2", "slow3"]
        );
    }

    /// Four threads free, yet a tenant's second job waits for its first.
    #[tokio::test]
    async fn a_tenants_jobs_never_run_at_once_on_many_threads() {
        let pool = Arc::new(RenderPool::new(4));
        let (started, running) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let first = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run(tenant("one"), move || {
                    started.send(()).unwrap();
                    released.recv().unwrap();
                })
                .await
            })
        };
        let second = {
            let pool = pool.clone();
            tokio::spawn(async move { pool.run(tenant("one"), || ()).await })
        };
        tokio::task::spawn_blocking(move || running.recv().unwrap())
            .await
            .unwrap();
        while !pool.shared.lock().jobs.contains_key(&tenant("one")) {
            tokio::task::yield_now().await;
        }
        {
            let q = pool.shared.lock();
            assert!(q.running.contains(&tenant("one")));
            assert!(q.turns.is_empty(), "the second job is not anyone's turn");
            assert_eq!(q.jobs[&tenant("one")].len(), 1, "it waits");
        }
        release.send(()).unwrap();
        first.await.unwrap();
        second.await.unwrap();
    }

    #[tokio::test]
    #[should_panic(expected = "a render failed")]
    async fn a_panic_in_a_job_is_the_callers() {
        let pool = RenderPool::new(1);
        pool.run(tenant("t"), || panic!("a render failed")).await;
    }

    /// Two threads, a tenant's batch being planned on one: the tenant's
    /// template check runs on the other at once, not after the batch.
    #[tokio::test]
    async fn a_tenants_registration_does_not_wait_for_its_batch() {
        let pool = Arc::new(RenderPool::new(2));
        let (started, running) = std::sync::mpsc::channel::<()>();
        let (release, released) = std::sync::mpsc::channel::<()>();
        let batch = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run(tenant("one"), move || {
                    started.send(()).unwrap();
                    released.recv().unwrap();
                })
                .await
            })
        };
        tokio::task::spawn_blocking(move || running.recv().unwrap())
            .await
            .unwrap();
        let registration = Lane {
            tenant: "one".parse().unwrap(),
            purpose: Purpose::Registration,
        };
        let (checked, check) = std::sync::mpsc::channel::<()>();
        pool.submit(
            registration.clone(),
            Box::new(move || checked.send(()).unwrap()),
        );
        let done = {
            // Its turn, running, or run already: not queued behind the batch.
            let q = pool.shared.lock();
            let done = check.try_recv().is_ok();
            let taken = q.turns.contains(&registration) || q.running.contains(&registration);
            assert!(taken || done, "the check waits behind the batch");
            done
        };
        if !done {
            tokio::task::spawn_blocking(move || check.recv().unwrap())
                .await
                .unwrap();
        }
        release.send(()).unwrap();
        batch.await.unwrap();
    }
}
