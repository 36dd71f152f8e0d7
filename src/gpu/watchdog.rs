//! A time limit on every wait for the GPU. A kernel that never finishes (a barrier that no one
//! arrives on, a cluster that waits for a block that exited) blocks `cuStreamSynchronize` for
//! ever, and nothing in the process can stop it: the stream cannot run anything else, and
//! tearing the context down waits for the kernel too. So a thread beside the waiting one
//! watches the deadline, and when it passes it names what was running and ends the process,
//! which is what frees the GPU.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

/// What to do when a wait outlives the limit, given what was running and the limit: report
/// and end the process. Should it return, the process aborts: it cannot go on with the GPU
/// busy.
pub type OnExpiry = Box<dyn Fn(&str, Duration) + Send>;

/// Watches one wait at a time (the GPU commands wait on one stream).
pub struct Watchdog {
    limit: Duration,
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    /// The wait in progress: its deadline and what it waits for.
    armed: Option<(Instant, String)>,
    stop: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the state itself is always whole.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Watchdog {
    /// Starts the watching thread.
    pub fn start(limit: Duration, on_expiry: OnExpiry) -> std::io::Result<Watchdog> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let watched = Arc::clone(&shared);
        thread::Builder::new()
            .name("tilegen-gpu-watchdog".into())
            .spawn(move || watch(&watched, limit, on_expiry))?;
        Ok(Watchdog { limit, shared })
    }

    /// Runs `wait` (a call that blocks on the GPU) under the deadline, naming it `what`.
    pub fn guard<T>(&self, what: String, wait: impl FnOnce() -> T) -> T {
        self.set(Some((Instant::now() + self.limit, what)));
        let out = wait();
        self.set(None);
        out
    }

    fn set(&self, armed: Option<(Instant, String)>) {
        self.shared.lock().armed = armed;
        self.shared.changed.notify_one();
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.lock().stop = true;
        self.shared.changed.notify_one();
    }
}

fn watch(shared: &Shared, limit: Duration, on_expiry: OnExpiry) {
    let mut state = shared.lock();
    while !state.stop {
        let deadline = state.armed.as_ref().map(|(at, _)| *at);
        state = match deadline {
            None => shared
                .changed
                .wait(state)
                .unwrap_or_else(|e| e.into_inner()),
            Some(at) => {
                let now = Instant::now();
                if now < at {
                    shared
                        .changed
                        .wait_timeout(state, at - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                } else {
                    let what = state.armed.take().map(|(_, w)| w).unwrap_or_default();
                    drop(state);
                    on_expiry(&what, limit);
                    std::process::abort()
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc;

    /// Reports expiries on a channel, then parks the watching thread for good (a real
    /// `OnExpiry` ends the process).
    fn reporting(tx: mpsc::Sender<String>) -> OnExpiry {
        let tx = Mutex::new(tx);
        Box::new(move |what, limit| {
            let _ = tx.lock().unwrap().send(format!("{what} after {limit:?}"));
            loop {
                thread::park();
            }
        })
    }

    #[test]
    fn a_wait_past_the_limit_is_named() {
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::start(Duration::from_millis(50), reporting(tx)).unwrap();
        let r = dog.guard("gemm_x case 7".into(), || {
            thread::sleep(Duration::from_millis(400));
            3
        });
        assert_eq!(r, 3);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            "gemm_x case 7 after 50ms"
        );
    }

    #[test]
    fn waits_within_the_limit_pass_and_the_deadline_restarts_with_each() {
        let (tx, rx) = mpsc::channel();
        let dog = Watchdog::start(Duration::from_millis(300), reporting(tx)).unwrap();
        // Six waits of 100 ms: 600 ms in all, each well inside the limit.
        for i in 0..6 {
            dog.guard(format!("wait {i}"), || {
                thread::sleep(Duration::from_millis(100))
            });
        }
        // Nothing armed between waits: a long pause outside them is no hang.
        thread::sleep(Duration::from_millis(400));
        assert!(rx.try_recv().is_err());
        drop(dog);
    }
}
